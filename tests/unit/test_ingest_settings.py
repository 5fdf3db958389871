"""The ingest's settings, with its providers' (ingest/providers/): frozen, validated, and
refusing weak secrets."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from paystream.env import EnvSettings
from paystream.ingest.settings import IngestSettings, SettingsError
from tests.support.ingest import ALCHEMY_KEY, PAYMENTS_SECRET, PAYMENTS_SECRET_BYTES


def _env(**overrides: str) -> dict[str, str]:
    return {"ALCHEMY_SIGNING_KEY": ALCHEMY_KEY, "PAYMENTS_WEBHOOK_SECRET": PAYMENTS_SECRET,
            **overrides}


def own(settings: IngestSettings, provider: str) -> Any:
    """The settings of the provider named `provider`, as the ingest read them."""
    [served] = [s for s in settings.providers if s.name == provider]
    assert isinstance(served.settings, EnvSettings)
    return served.settings


def test_settings_from_env_decode_the_whsec_secret() -> None:
    settings = IngestSettings.from_env(_env(PAYMENTS_DEFAULT_ASSET="EUR",
                                            PAYMENTS_ASSETS="USD,EUR"))
    payments = own(settings, "payments")
    assert payments.secrets == (PAYMENTS_SECRET_BYTES,)
    assert own(settings, "alchemy").signing_keys == (ALCHEMY_KEY.encode(),)
    assert payments.default_asset == "EUR"
    assert payments.assets == ("USD", "EUR")
    assert settings.max_body_bytes == 1024 * 1024


def test_settings_accept_several_secrets_for_a_rotation() -> None:
    other = "whsec_" + base64.b64encode(b"n" * 40).decode()
    settings = IngestSettings.from_env(_env(PAYMENTS_WEBHOOK_SECRET=f"{PAYMENTS_SECRET} {other}"))
    assert own(settings, "payments").secrets == (PAYMENTS_SECRET_BYTES, b"n" * 40)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"ALCHEMY_SIGNING_KEY": ""}, "ALCHEMY_SIGNING_KEY is required"),
    ({"PAYMENTS_WEBHOOK_SECRET": ""}, "PAYMENTS_WEBHOOK_SECRET is required"),
    ({"ALCHEMY_SIGNING_KEY": "short-key"}, "9 bytes after decoding; at least 32"),
    ({"PAYMENTS_WEBHOOK_SECRET": "whsec_" + base64.b64encode(b"x" * 31).decode()},
     "31 bytes after decoding"),
    # 44 characters of text, but only 31 bytes once decoded: the decoded length counts.
    ({"PAYMENTS_WEBHOOK_SECRET": base64.b64encode(b"y" * 31).decode()}, "31 bytes"),
    ({"PAYMENTS_WEBHOOK_SECRET": "whsec_not*base64"},
     "^PAYMENTS_WEBHOOK_SECRET must be whsec_ followed by base64$"),
    ({"PAYSTREAM_INGEST_MAX_BODY_BYTES": "lots"}, "must be an integer"),
    ({"PAYSTREAM_INGEST_RATE_PER_SECOND": "0"}, "RATE_PER_SECOND must be positive, got '0'"),
    ({"PAYMENTS_DEFAULT_ASSET": "U S D"}, "not a valid asset"),
    ({"PAYMENTS_DEFAULT_ASSET": "EUR"}, "EUR' is not in PAYMENTS_ASSETS USD"),
    ({"PAYMENTS_ASSETS": "USD,ETH_MAINNET:native"}, "'ETH_MAINNET:native' is not a gateway"),
    ({"PAYMENTS_ASSETS": "USD,U$D"}, "'U\\$D' is not a gateway asset"),
    ({"PAYMENTS_ASSETS": " , "}, "PAYMENTS_ASSETS names no asset"),
])
def test_settings_refuse_to_start_with_a_clear_message(overrides: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        IngestSettings.from_env(_env(**overrides))


def test_the_gateway_may_credit_usd_alone_by_default() -> None:
    assert own(IngestSettings.from_env(_env()), "payments").assets == ("USD",)


def test_settings_are_frozen() -> None:
    settings = IngestSettings.from_env(_env())
    with pytest.raises(AttributeError):
        settings.max_body_bytes = 1  # type: ignore[misc]


def test_group_commit_settings_have_safe_defaults_and_bounds() -> None:
    settings = IngestSettings.from_env(_env())
    assert (settings.db_writers, settings.commit_batch_max, settings.commit_linger_ms) == (
        2, 128, 0.0)  # natural batching: no added wait when traffic is light
    tuned = IngestSettings.from_env(_env(PAYSTREAM_INGEST_DB_WRITERS="1",
                                         PAYSTREAM_INGEST_COMMIT_BATCH_MAX="256",
                                         PAYSTREAM_INGEST_COMMIT_LINGER_MS="1.5"))
    assert (tuned.db_writers, tuned.commit_batch_max, tuned.commit_linger_ms) == (1, 256, 1.5)
    for name, value, message in (
            ("PAYSTREAM_INGEST_DB_WRITERS", "0", "DB_WRITERS must be at least 1, got '0'"),
            ("PAYSTREAM_INGEST_COMMIT_BATCH_MAX", "0", "BATCH_MAX must be at least 1"),
            ("PAYSTREAM_INGEST_COMMIT_LINGER_MS", "5000", "LINGER_MS must be at most 1000")):
        with pytest.raises(SettingsError, match=message):
            IngestSettings.from_env(_env(**{name: value}))


def test_the_http_edge_is_closed_by_default() -> None:
    settings = IngestSettings.from_env(_env())
    assert settings.trusted_proxies == ()  # X-Forwarded-For believed from no one
    assert (settings.admin_host, settings.admin_port) == ("127.0.0.1", 8001)
    assert (settings.max_header_bytes, settings.max_headers) == (16 * 1024, 100)
    assert settings.body_timeout_s == settings.header_timeout_s == 10.0
    proxies = IngestSettings.from_env(_env(PAYSTREAM_INGEST_TRUSTED_PROXIES=
                                           "10.0.0.1, 10.1.0.0/16"))
    assert proxies.trusted_proxies == ("10.0.0.1", "10.1.0.0/16")


@pytest.mark.parametrize(("name", "value", "message"), [
    ("PAYSTREAM_INGEST_BODY_TIMEOUT_S", "0", "BODY_TIMEOUT_S must be positive, got '0'"),
    ("PAYSTREAM_INGEST_HEADER_TIMEOUT_S", "-1", "HEADER_TIMEOUT_S must be positive, got '-1'"),
    ("PAYSTREAM_INGEST_MAX_HEADERS", "2", "MAX_HEADERS must be at least 8, got '2'"),
    ("PAYSTREAM_INGEST_MAX_CONNECTIONS", "0", "MAX_CONNECTIONS must be at least 1, got '0'"),
    ("PAYSTREAM_INGEST_ADMIN_PORT", "0", "ADMIN_PORT must be at least 1, got '0'"),
])
def test_edge_limits_out_of_range_refuse_to_start(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        IngestSettings.from_env(_env(**{name: value}))
