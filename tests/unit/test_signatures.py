"""Both signature schemes: valid, invalid, missing, re-serialised JSON, rotation, time."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from paystream.ingest import alchemy_signature, standard_webhooks
from paystream.ingest.errors import SignatureError

KEY = b"alchemy-signing-key-of-32-bytes-or-more"
OLD_KEY = b"alchemy-old-signing-key-32-bytes-or-more"
BODY = b'{"webhookId":"wh_1","id":"whevt_1","type":"ADDRESS_ACTIVITY","event":{"amount":"1.50"}}'
SECRET = b"standard-webhooks-secret-32-bytes!!"
NEXT_SECRET = b"standard-webhooks-next-secret-32bytes!"
NOW = 1_700_000_000


# --- Alchemy: hex HMAC-SHA256 of the raw body -------------------------------------------

def test_alchemy_accepts_the_hmac_of_the_raw_body() -> None:
    alchemy_signature.verify(BODY, alchemy_signature.sign(BODY, KEY), [KEY])


def test_alchemy_accepts_uppercase_hex_and_surrounding_space() -> None:
    alchemy_signature.verify(BODY, " " + alchemy_signature.sign(BODY, KEY).upper(), [KEY])


@pytest.mark.parametrize("header", [None, ""])
def test_alchemy_refuses_a_missing_signature(header: str | None) -> None:
    with pytest.raises(SignatureError, match="missing"):
        alchemy_signature.verify(BODY, header, [KEY])


@pytest.mark.parametrize("header", ["00" * 32, "not-hex", "sha256=abc", "é" * 64, "\x00"])
def test_alchemy_refuses_a_wrong_or_malformed_signature(header: str) -> None:
    with pytest.raises(SignatureError, match="does not match"):
        alchemy_signature.verify(BODY, header, [KEY])


def test_alchemy_refuses_a_signature_made_with_another_key() -> None:
    with pytest.raises(SignatureError):
        alchemy_signature.verify(BODY, alchemy_signature.sign(BODY, OLD_KEY), [KEY])


def test_alchemy_refuses_a_signature_over_re_serialised_json() -> None:
    # The classic integration bug: signing json.dumps(json.loads(body)) instead of bytes.
    reserialised = json.dumps(json.loads(BODY)).encode()
    assert reserialised != BODY
    with pytest.raises(SignatureError):
        alchemy_signature.verify(BODY, alchemy_signature.sign(reserialised, KEY), [KEY])


def test_alchemy_refuses_a_body_changed_after_signing() -> None:
    signature = alchemy_signature.sign(BODY, KEY)
    with pytest.raises(SignatureError):
        alchemy_signature.verify(BODY.replace(b"1.50", b"9.50"), signature, [KEY])


def test_alchemy_accepts_any_configured_key_during_a_rotation() -> None:
    for key in (OLD_KEY, KEY):
        alchemy_signature.verify(BODY, alchemy_signature.sign(BODY, key), [OLD_KEY, KEY])


# --- Standard Webhooks: base64 HMAC-SHA256 of "{id}.{timestamp}.{body}" -----------------

def _headers(body: bytes = BODY, *, msg_id: str = "msg_1", timestamp: int = NOW,
             secrets: tuple[bytes, ...] = (SECRET,)) -> dict[str, str]:
    signatures = " ".join(standard_webhooks.sign(msg_id, timestamp, body, s) for s in secrets)
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signatures}


def _verify(headers: dict[str, str], body: bytes = BODY,
            secrets: tuple[bytes, ...] = (SECRET,), now: float = NOW) -> str:
    return standard_webhooks.verify(body, headers, secrets, tolerance_s=300, now=now)


def test_standard_signature_is_valid_and_returns_the_message_id() -> None:
    assert _verify(_headers()) == "msg_1"


def test_standard_signature_matches_the_spec_construction() -> None:
    content = b"msg_1." + str(NOW).encode() + b"." + BODY
    expected = base64.b64encode(hmac.new(SECRET, content, hashlib.sha256).digest()).decode()
    assert standard_webhooks.sign("msg_1", NOW, BODY, SECRET) == "v1," + expected


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_standard_refuses_a_missing_header(missing: str) -> None:
    headers = _headers()
    del headers[missing]
    with pytest.raises(SignatureError, match=missing):
        _verify(headers)


def test_standard_refuses_a_wrong_signature() -> None:
    headers = _headers()
    headers["webhook-signature"] = "v1," + base64.b64encode(b"x" * 32).decode()
    with pytest.raises(SignatureError, match="no webhook-signature entry matches"):
        _verify(headers)


@pytest.mark.parametrize("value", ["v2,abc", "abc", "v1", "", "v1a,xyz"])
def test_standard_refuses_a_header_without_a_v1_entry(value: str) -> None:
    headers = _headers()
    headers["webhook-signature"] = value
    with pytest.raises(SignatureError):
        _verify(headers)


def test_standard_refuses_a_signature_over_re_serialised_json() -> None:
    reserialised = json.dumps(json.loads(BODY)).encode()
    with pytest.raises(SignatureError):
        _verify(_headers(reserialised), body=BODY)


def test_standard_refuses_a_signature_for_another_message_id() -> None:
    headers = _headers()
    headers["webhook-id"] = "msg_2"
    with pytest.raises(SignatureError):
        _verify(headers)


def test_standard_accepts_several_signatures_when_the_sender_rotates() -> None:
    # The sender signs with the old and the new secret; we know only one of them.
    headers = _headers(secrets=(NEXT_SECRET, SECRET))
    assert " " in headers["webhook-signature"]
    assert _verify(headers, secrets=(SECRET,)) == "msg_1"
    assert _verify(headers, secrets=(NEXT_SECRET,)) == "msg_1"


def test_standard_accepts_any_of_our_secrets_when_we_rotate() -> None:
    assert _verify(_headers(secrets=(NEXT_SECRET,)), secrets=(SECRET, NEXT_SECRET)) == "msg_1"


def test_standard_ignores_entries_of_other_versions() -> None:
    headers = _headers()
    headers["webhook-signature"] = "v1a,junk v2,junk " + headers["webhook-signature"]
    assert _verify(headers) == "msg_1"


@pytest.mark.parametrize("offset", [-300, 0, 300])
def test_standard_accepts_timestamps_within_five_minutes(offset: int) -> None:
    assert _verify(_headers(timestamp=NOW + offset)) == "msg_1"


@pytest.mark.parametrize("offset", [-301, -86_400, 301, 86_400])
def test_standard_refuses_stale_and_future_timestamps(offset: int) -> None:
    with pytest.raises(SignatureError, match="from now"):
        _verify(_headers(timestamp=NOW + offset))


@pytest.mark.parametrize("value", ["abc", "-5", "1.5", "1e9", "١٧٠٠٠٠٠٠٠٠", "9" * 40])
def test_standard_refuses_a_timestamp_that_is_not_unix_seconds(value: str) -> None:
    headers = _headers()
    headers["webhook-timestamp"] = value
    with pytest.raises(SignatureError, match="Unix seconds"):
        _verify(headers)


def test_standard_refuses_a_non_ascii_signature_without_crashing() -> None:
    headers = _headers()
    headers["webhook-signature"] = "v1,é€" * 3
    with pytest.raises(SignatureError):
        _verify(headers)
