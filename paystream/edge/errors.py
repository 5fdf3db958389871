"""Refusals of the HTTP edges (the ingest and the merchant API): one exception per status,
with its code and reason, and the one JSON body every refusal is answered with
(`{"status": "error", "code", "reason", "trace_id"}`).

A class per status with the generic code; a refusal an edge names more precisely is a
subclass with its own code (the ingest's bad signature is an UnauthorizedError coded
`invalid_signature`, ingest/errors.py), or the code given where it is raised.
"""

from __future__ import annotations

from typing import Any

from paystream.refusals import Conflict, Invalid, NotFound, Refused


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


class InvalidRequestError(RefusalError):
    """400: a parameter or body that fails validation."""

    status, code = 400, "invalid_request"


class UnauthorizedError(RefusalError):
    """401: the caller is not who it must be (no live API key, no valid signature)."""

    status, code = 401, "unauthorized"


class ForbiddenError(RefusalError):
    """403: a live key without the scope the route needs."""

    status, code = 403, "forbidden"


class NotFoundError(RefusalError):
    """404: no such resource."""

    status, code = 404, "not_found"


class ConflictError(RefusalError):
    """409: the request contradicts what is stored (an Idempotency-Key or an event id
    already used with other content, an address of another user); nothing was written."""

    status, code = 409, "conflict"


class RateLimitError(RefusalError):
    """429: the caller spent its token bucket; Retry-After says when to come back."""

    status, code = 429, "rate_limited"


class DatabaseUnavailableError(RefusalError):
    """503: Postgres is unreachable, too slow, or every connection is busy; Retry-After
    says when to try again."""

    status, code = 503, "database_unavailable"


def error_body(code: str, reason: str, trace_id: str) -> dict[str, Any]:
    """The body of every refusal."""
    return {"status": "error", "code": code, "reason": reason, "trace_id": trace_id}


def retry_headers(refusal: RefusalError) -> dict[str, str]:
    return {} if refusal.retry_after is None else {"Retry-After": str(refusal.retry_after)}


def refusal_of(exc: Refused) -> RefusalError:
    """A domain refusal (paystream/refusals.py) as the HTTP refusal it is answered with."""
    kind: type[RefusalError] = (InvalidRequestError if isinstance(exc, Invalid) else
                                NotFoundError if isinstance(exc, NotFound) else
                                ConflictError if isinstance(exc, Conflict) else RefusalError)
    return kind(exc.detail, code=exc.code)
