"""The ledger's idempotency key: one owner for how (event_id, event_type) becomes a key."""

from __future__ import annotations

import hashlib


def idempotency_key(event_id: str, event_type: str) -> str:
    """SHA-256 hex of the length-prefixed fields, so ("ab","c") and ("a","bc") differ."""
    digest = hashlib.sha256()
    for field in (event_id, event_type):
        data = field.encode("utf-8")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()
