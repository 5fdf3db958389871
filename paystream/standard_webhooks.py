"""Standard Webhooks signatures (the scheme Svix and many payment gateways implement).

Signed content is `{webhook-id}.{webhook-timestamp}.{raw body}`, HMAC-SHA256, base64.
`webhook-signature` lists one or more `v1,<base64>` entries separated by spaces so the
sender can rotate secrets without downtime; we may hold several secrets too. A request
is authentic when any listed v1 signature matches any of our secrets, and its
timestamp is within the tolerance (a captured request cannot be replayed later).

The one owner of the scheme on both sides: the ingest verifies what providers send
(ingest/standard_webhooks.py turns a refusal into its 401), the notifier signs what it
delivers (notify/delivery.py). Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import hmac
import time
from collections.abc import Mapping, Sequence

from paystream.hmac_keys import keyed_sha256

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
MAX_ID_LENGTH = 256
SECRET_PREFIX = "whsec_"  # a secret as shown to people: whsec_<base64 of the key>


class SignatureError(ValueError):
    """The request is not authentic or not fresh; the message says why."""


def encode_secret(key: bytes) -> str:
    """The `whsec_<base64>` form receivers configure (what the Standard Webhooks
    libraries take)."""
    return SECRET_PREFIX + base64.b64encode(key).decode("ascii")


def decode_secret(text: str) -> bytes:
    """The key of a `whsec_<base64>` secret; ValueError if it is not one."""
    if not text.startswith(SECRET_PREFIX):
        raise ValueError(f"a secret starts with {SECRET_PREFIX}")
    return base64.b64decode(text.removeprefix(SECRET_PREFIX), validate=True)


def headers(msg_id: str, timestamp: int, body: bytes, secrets: Sequence[bytes]
            ) -> dict[str, str]:
    """The three headers of a delivery signed with every key of `secrets` (the new one
    and, during a rotation, the previous: receivers accept either)."""
    return {ID_HEADER: msg_id, TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: " ".join(sign(msg_id, timestamp, body, s) for s in secrets)}


def sign(msg_id: str, timestamp: int, body: bytes, secret: bytes) -> str:
    """One `v1,<base64>` signature entry for the given content."""
    return "v1," + _digest(msg_id, timestamp, body, secret).decode("ascii")


def _digest(msg_id: str, timestamp: int, body: bytes, secret: bytes) -> bytes:
    mac = keyed_sha256(secret)
    mac.update(f"{msg_id}.{timestamp}.".encode())
    mac.update(body)
    return base64.b64encode(mac.digest())


def verify(body: bytes, headers: Mapping[str, str], secrets: Sequence[bytes], *,
           tolerance_s: int, now: float | None = None) -> str:
    """Raise SignatureError unless the request is authentic and fresh; return webhook-id."""
    msg_id = headers.get(ID_HEADER)
    raw_ts = headers.get(TIMESTAMP_HEADER)
    raw_sigs = headers.get(SIGNATURE_HEADER)
    missing = [name for name, value in ((ID_HEADER, msg_id), (TIMESTAMP_HEADER, raw_ts),
                                        (SIGNATURE_HEADER, raw_sigs)) if not value]
    if missing:
        raise SignatureError("missing header(s): " + ", ".join(missing))
    assert msg_id is not None and raw_ts is not None and raw_sigs is not None
    if len(msg_id) > MAX_ID_LENGTH or not msg_id.isascii() or not msg_id.isprintable():
        raise SignatureError("webhook-id must be printable ASCII of at most "
                           f"{MAX_ID_LENGTH} characters")
    if not raw_ts.isascii() or not raw_ts.isdigit() or len(raw_ts) > 12:
        raise SignatureError("webhook-timestamp must be integer Unix seconds")
    timestamp = int(raw_ts)
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise SignatureError(f"webhook-timestamp is more than {tolerance_s} s from now")
    given = [entry.removeprefix("v1,").encode("latin-1", errors="replace")
             for entry in raw_sigs.split(" ") if entry.startswith("v1,")]
    if not given:
        raise SignatureError("webhook-signature has no v1 entry")
    matched = False
    for secret in secrets:
        expected = _digest(msg_id, timestamp, body, secret)
        for candidate in given:
            matched |= hmac.compare_digest(expected, candidate)
    if not matched:
        raise SignatureError("no webhook-signature entry matches the body")
    return msg_id
