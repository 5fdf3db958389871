"""The ingest's refusals: the statuses a provider can see are these and the edge kit's
(paystream/edge/errors.py), each raised where its rule lives and turned into a JSON body
by ingest/webhooks.py.
"""

from __future__ import annotations

from paystream.edge.errors import (
    ConflictError,
    InvalidRequestError,
    RefusalError,
    UnauthorizedError,
)
from paystream.edge.errors import DatabaseUnavailableError as DatabaseUnavailableError
from paystream.edge.errors import RateLimitError as RateLimitError

# The base of every refusal, by the name the ingest's modules use.
IngestError = RefusalError


class SignatureError(UnauthorizedError):
    """401: the signature is missing, malformed, stale or does not match."""

    code = "invalid_signature"


class PayloadError(InvalidRequestError):
    """400: malformed JSON, a missing field, or a value that fails validation."""

    code = "invalid_payload"


class ConflictingDuplicateError(ConflictError):
    """409: an event id already recorded with other content; nothing was written."""

    code = "conflicting_duplicate"

    def __init__(self, detail: str, *, event_id: str) -> None:
        super().__init__(detail)
        self.event_id = event_id


class BodyTimeoutError(IngestError):
    """408: the body did not arrive within the deadline; the connection is closed."""

    status, code = 408, "body_timeout"


class BodyTooLargeError(IngestError):
    """413: the body exceeds the configured limit (it is not read any further)."""

    status, code = 413, "body_too_large"


class MediaTypeError(IngestError):
    """415: the request does not declare a JSON body."""

    status, code = 415, "unsupported_media_type"


class NotApplicableError(IngestError):
    """422: a signed, valid event known not to apply (ingest.refusals says which): its
    user does not exist (`unknown_user`), or it names another user's event
    (`reference_of_other_user`). Recorded in refused_deliveries, nothing else written."""

    status, code = 422, "unknown_user"

    def __init__(self, detail: str, *, code: str, event_id: str) -> None:
        super().__init__(detail, code=code)
        self.event_id = event_id
