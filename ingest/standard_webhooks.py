"""Standard Webhooks on the ingest's side: the scheme itself is paystream/standard_webhooks.py
(the notifier signs with it too); a refusal here is the ingest's 401."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from paystream import standard_webhooks as scheme
from paystream.ingest.errors import SignatureError
from paystream.standard_webhooks import ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

__all__ = ["ID_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "sign", "verify"]


def verify(body: bytes, headers: Mapping[str, str], secrets: Sequence[bytes], *,
           tolerance_s: int, now: float | None = None) -> str:
    """scheme.verify, its refusal raised as the ingest's SignatureError (401)."""
    try:
        return scheme.verify(body, headers, secrets, tolerance_s=tolerance_s, now=now)
    except scheme.SignatureError as exc:
        raise SignatureError(str(exc)) from None
