"""The merchant API's pure rules: keys and their hash, scopes, cursors, what "the same
withdrawal request" means, the status a merchant sees, the doors of the two listeners,
and the settings refused. No services."""

from __future__ import annotations

import hashlib
import secrets
from decimal import Decimal

import pytest
from starlette.testclient import TestClient

from paystream.api import keys, reads, withdrawals
from paystream.api.app import create_app
from paystream.api.auth import Authenticator
from paystream.api.settings import ApiSettings
from paystream.edge.errors import InvalidRequestError, UnauthorizedError
from paystream.env import SettingsError
from paystream.ingest.errors import PayloadError
from paystream.ingest.payments import parse_payment


def test_a_key_is_256_random_bits_and_is_stored_as_its_sha256() -> None:
    made = [keys.KEY_PREFIX + secrets.token_urlsafe(32) for _ in range(50)]
    assert all(keys.KEY_PATTERN.fullmatch(k) for k in made)
    assert len(set(made)) == 50
    key = made[0]
    assert keys.key_hash(key) == hashlib.sha256(key.encode()).hexdigest()
    assert keys.key_hash(key) != keys.key_hash(made[1])


def test_scopes_are_read_and_write_only() -> None:
    assert keys.parse_scopes("read,write") == {keys.Scope.READ, keys.Scope.WRITE}
    assert keys.parse_scopes(" write ") == {keys.Scope.WRITE}
    with pytest.raises(keys.ApiKeyError, match="unknown scope 'admin'"):
        keys.parse_scopes("read,admin")
    with pytest.raises(keys.ApiKeyError):
        keys.parse_scopes([])


@pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer", "Bearer not-a-key",
                                    "Bearer psk_short"])
def test_a_token_that_is_no_key_is_401_before_any_query(header: str | None) -> None:
    with pytest.raises(UnauthorizedError):
        Authenticator.bearer(header)


def test_a_cursor_is_a_transfer_id_and_nothing_else() -> None:
    assert reads.parse_cursor(None) is None and reads.parse_cursor("") is None
    assert reads.parse_cursor("42") == 42
    assert reads.parse_cursor(str(2**63 - 1)) == 2**63 - 1
    for bad in ("0", "-1", "01", "4.2", "x", str(2**63), "9" * 20):
        with pytest.raises(InvalidRequestError):
            reads.parse_cursor(bad)


def _request(**change: str) -> withdrawals.WithdrawalRequest:
    body = {"user_id": "u-1", "asset": "USD", "amount": "5.50", "destination": "acct",
            **change}
    return withdrawals.parse_request(body["user_id"], body["asset"], body["amount"],
                                     body["destination"], ("USD", "EUR"))


def test_the_same_request_is_the_same_validated_body() -> None:
    assert _request().amount == Decimal("5.5")
    assert _request().request_hash() == _request(amount="5.5").request_hash()
    assert _request().request_hash() == _request(amount="55e-1").request_hash()
    for change in ({"amount": "5.51"}, {"destination": "acct2"}, {"asset": "EUR"},
                   {"user_id": "u-2"}):
        assert _request(**change).request_hash() != _request().request_hash(), change


@pytest.mark.parametrize(("change", "code"), [
    ({"amount": "0"}, "invalid_amount"), ({"amount": "1.0000000000000000001"},
                                          "invalid_amount"),
    ({"asset": "GBP"}, "unsupported_asset"), ({"user_id": "a b"}, "invalid_user_id"),
    ({"destination": ""}, "invalid_destination"), ({"destination": "x" * 201},
                                                   "invalid_destination")])
def test_a_withdrawal_that_cannot_be_one_is_refused_naming_the_field(change: dict,
                                                                     code: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        _request(**change)
    assert caught.value.code == code


def test_an_idempotency_key_is_required_and_printable() -> None:
    assert withdrawals.check_idempotency_key("order-42") == "order-42"
    for bad in (None, "", "has space", "x" * 201, "é"):
        with pytest.raises(InvalidRequestError):
            withdrawals.check_idempotency_key(bad)


def test_the_status_a_merchant_sees() -> None:
    assert reads.withdrawal_status("received", None) == "requested"
    assert reads.withdrawal_status("rejected", None) == "rejected"
    assert reads.withdrawal_status("dead_lettered", None) == "dead_lettered"
    assert reads.withdrawal_status("applied", "held") == "held"
    assert reads.withdrawal_status("applied", "settled") == "settled"


def test_a_gateway_may_not_take_an_event_id_of_the_api() -> None:
    with pytest.raises(PayloadError, match="api:"):
        parse_payment({"event_id": "api:withdrawal:" + "0" * 32, "event_type": "deposit",
                       "user_id": "u", "amount": "1"}, "USD")


def test_the_public_port_serves_v1_and_the_admin_port_the_docs() -> None:
    # TestClient's requests arrive on port 80: as the admin port here, as public there.
    public = TestClient(create_app(ApiSettings(admin_port=8101)).__call__)
    admin = TestClient(create_app(ApiSettings(admin_port=80)).__call__)
    assert public.get("/healthz").status_code == 200
    assert admin.get("/healthz").status_code == 200
    assert public.get("/docs").status_code == 404
    assert public.get("/openapi.json").status_code == 404
    assert admin.get("/docs").status_code == 200
    spec = admin.get("/openapi.json").json()
    assert {"/v1/users/{user_id}/balances", "/v1/withdrawals",
            "/v1/users/{user_id}/transactions"} <= set(spec["paths"])
    refused = admin.get("/v1/users/u/balances")
    assert refused.status_code == 404 and refused.json()["code"] == "http_404"
    # Without a key, a /v1 route refuses before it needs the database (none here: the
    # settings name no DSN, so any connection attempt would answer 503).
    no_key = public.get("/v1/users/u/balances")
    assert no_key.status_code == 401 and no_key.json()["code"] == "missing_api_key"


@pytest.mark.parametrize(("change", "match"), [
    ({"db_pool_size": 0}, "POOL_SIZE"), ({"rate_per_second": 0}, "RATE_PER_SECOND"),
    ({"withdrawal_assets": ()}, "names no asset"),
    ({"withdrawal_assets": ("bad asset",)}, "not an asset")])
def test_settings_out_of_range_are_refused(change: dict, match: str) -> None:
    with pytest.raises(SettingsError, match=match):
        ApiSettings(**change)


def test_a_bug_is_a_json_500_in_the_error_format() -> None:
    app = create_app(ApiSettings(admin_port=80))

    @app.api.get("/boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    answer = TestClient(app.__call__, raise_server_exceptions=False).get("/boom")
    assert answer.status_code == 500
    assert answer.json()["code"] == "internal_error"
    assert "a bug" not in answer.text


def test_a_moment_reaches_postgres_in_utc_whatever_its_offset() -> None:
    """Python takes offsets up to ±23:59, Postgres only ±15:59: +16:00 was a 500."""
    from datetime import UTC, datetime, timedelta, timezone

    from paystream.api.routes_balances import utc_moment as _moment

    far = datetime(2000, 1, 1, tzinfo=timezone(timedelta(hours=16)))
    assert _moment(far) == "1999-12-31T08:00:00+00:00"
    assert _moment(datetime(2000, 1, 1)) == "2000-01-01T00:00:00+00:00"  # naive: UTC
    assert _moment(datetime(2000, 1, 1, tzinfo=UTC)) == "2000-01-01T00:00:00+00:00"
    assert _moment(None) is None
