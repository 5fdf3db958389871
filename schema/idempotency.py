"""The ledger's idempotency key: one owner for how (event_id, event_type) becomes a key."""

from __future__ import annotations

import hashlib


def idempotency_key(event_id: str, event_type: str) -> str:
    """SHA-256 hex of the length-prefixed fields, so ("ab","c") and ("a","bc") differ.
    The bytes are joined first and hashed in one call: the ledger takes two keys per
    event (its claim and its notification's id), and four update() calls cost twice as
    much."""
    a, b = event_id.encode("utf-8"), event_type.encode("utf-8")
    return hashlib.sha256(b"".join((len(a).to_bytes(8, "big"), a,
                                    len(b).to_bytes(8, "big"), b))).hexdigest()
