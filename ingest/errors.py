"""Answers that are not successes: each carries its HTTP status and a reason.

Every refusal is an IngestError raised where the rule lives and turned into a JSON body
by the app, so the status codes a provider can see are listed here and nowhere else.
"""

from __future__ import annotations

from paystream.http_errors import RateLimitError as RateLimitError  # re-exported
from paystream.http_errors import RefusalError

# The base of every refusal (paystream/http_errors.py, shared with the merchant API).
IngestError = RefusalError


class SignatureError(IngestError):
    """401: the signature is missing, malformed, stale or does not match."""

    status = 401
    code = "invalid_signature"


class PayloadError(IngestError):
    """400: malformed JSON, a missing field, or a value that fails validation."""

    status = 400
    code = "invalid_payload"


class ConflictError(IngestError):
    """409: an event id already recorded with other content; nothing was written."""

    status = 409
    code = "conflicting_duplicate"

    def __init__(self, detail: str, *, event_id: str) -> None:
        super().__init__(detail)
        self.event_id = event_id


class BodyTimeoutError(IngestError):
    """408: the body did not arrive within the deadline; the connection is closed."""

    status = 408
    code = "body_timeout"


class BodyTooLargeError(IngestError):
    """413: the body exceeds the configured limit (it is not read any further)."""

    status = 413
    code = "body_too_large"


class MediaTypeError(IngestError):
    """415: the request does not declare a JSON body."""

    status = 415
    code = "unsupported_media_type"


class DatabaseUnavailableError(IngestError):
    """503: Postgres is unreachable or too slow; the provider must retry later."""

    status = 503
    code = "database_unavailable"


class NotApplicableError(IngestError):
    """422: a signed, valid event known not to apply (ingest.refusals says which): its
    user does not exist (`unknown_user`), or it names another user's event
    (`reference_of_other_user`). Recorded in refused_deliveries, nothing else written."""

    status = 422
    code = "unknown_user"

    def __init__(self, detail: str, *, code: str, event_id: str) -> None:
        super().__init__(detail, code=code)
        self.event_id = event_id
