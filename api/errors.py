"""The API's refusals: each a paystream.http_errors.RefusalError, answered in the ingest's
error format (`{"status": "error", "code", "reason", "trace_id"}`) by api/app.py."""

from __future__ import annotations

from paystream.http_errors import RateLimitError as RateLimitError  # re-exported
from paystream.http_errors import RefusalError


class InvalidRequestError(RefusalError):
    """400: a parameter or body that fails validation."""

    status = 400
    code = "invalid_request"


class UnauthorizedError(RefusalError):
    """401: no bearer token, or one that is not a live API key."""

    status = 401
    code = "unauthorized"


class ForbiddenError(RefusalError):
    """403: a live key without the scope the route needs."""

    status = 403
    code = "forbidden"


class NotFoundError(RefusalError):
    """404: no such user, event or withdrawal."""

    status = 404
    code = "not_found"


class ConflictError(RefusalError):
    """409: an Idempotency-Key already used with another body, an address of another
    user."""

    status = 409
    code = "conflict"


class DatabaseUnavailableError(RefusalError):
    """503: Postgres is unreachable, too slow, or every connection is busy."""

    status = 503
    code = "database_unavailable"
