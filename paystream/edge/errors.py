"""Refusals of the HTTP services (the ingest and the merchant API): one exception with its
status, code and reason, and the one JSON body every refusal is answered with.

Shared so that both services answer in one format (`{"status": "error", "code",
"reason", "trace_id"}`) and share the token buckets (paystream/rate_limit.py) without
importing each other.
"""

from __future__ import annotations

from typing import Any


class RefusalError(Exception):
    """A request answered with `status`; `code` is a short machine label, `detail` the
    reason a person reads, `retry_after` (seconds) for a 429 or a 503."""

    status = 400
    code = "bad_request"

    def __init__(self, detail: str, *, code: str | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.retry_after = retry_after


class RateLimitError(RefusalError):
    """429: the caller spent its token bucket; Retry-After says when to come back."""

    status = 429
    code = "rate_limited"


def error_body(code: str, reason: str, trace_id: str) -> dict[str, Any]:
    """The body of every refusal."""
    return {"status": "error", "code": code, "reason": reason, "trace_id": trace_id}


def retry_headers(refusal: RefusalError) -> dict[str, str]:
    return {} if refusal.retry_after is None else {"Retry-After": str(refusal.retry_after)}
