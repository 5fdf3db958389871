"""Alchemy Notify's signature: lowercase hex HMAC-SHA256 of the raw body.

The HMAC is computed over the exact bytes received, never over re-serialised JSON
(key order, spacing and escapes would differ), and compared in constant time. The
scheme has no timestamp: replays are harmless only because writes are idempotent.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from paystream.hmac_keys import keyed_sha256
from paystream.ingest.errors import SignatureError

HEADER = "x-alchemy-signature"


def sign(body: bytes, key: bytes) -> str:
    """The signature Alchemy sends for `body` (also used by tests and benchmarks)."""
    mac = keyed_sha256(key)
    mac.update(body)
    return mac.hexdigest()


def verify(body: bytes, header: str | None, keys: Sequence[bytes]) -> None:
    """Raise SignatureError unless `header` is the HMAC of `body` under one of `keys`."""
    if not header:
        raise SignatureError("missing X-Alchemy-Signature header")
    # Bytes, not str: compare_digest refuses non-ASCII text, and headers may hold any.
    given = header.strip().lower().encode("latin-1", errors="replace")
    matched = False
    for key in keys:
        expected = sign(body, key).encode("ascii")
        # No early exit: the time taken does not depend on which key matched.
        matched |= hmac.compare_digest(expected, given)
    if not matched:
        raise SignatureError("X-Alchemy-Signature does not match the body")
