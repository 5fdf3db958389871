"""The OpenAPI description of the ingest (served at /docs and /openapi.json): what every
webhook answers, and the pieces of a request description the providers share (each
provider's own headers and body are in its module, ingest/providers/).

The webhook handlers read the raw body themselves (the signature covers the exact bytes,
so FastAPI must not parse it first); these models and fragments only document what the
handlers accept and answer, for readers and for schemathesis.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel


class EventResult(BaseModel):
    event_id: str
    outcome: Literal["accepted", "duplicate"]


class WebhookAnswer(BaseModel):
    status: Literal["accepted", "duplicate"]
    trace_id: str
    events: list[EventResult]
    notices_recorded: int
    notices_known: int


class ErrorAnswer(BaseModel):
    status: Literal["error"]
    code: str
    reason: str
    trace_id: str | None = None
    event_id: str | None = None


class HealthAnswer(BaseModel):
    status: Literal["ok", "ready"]


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorAnswer, "description": description}


def _retry(description: str) -> dict[str, Any]:
    return {**_error(description), "headers": {"Retry-After": {
        "description": "seconds to wait before retrying", "schema": {"type": "string"}}}}


WEBHOOK_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": WebhookAnswer, "description": "recorded (accepted) or already known "
                                                 "(duplicate); nothing is ever credited twice"},
    400: _error("malformed JSON, a missing field or a failed validation"),
    401: _error("missing or invalid signature (checked before the body is parsed)"),
    404: _error("unknown path"),
    408: _error("the body did not arrive within the deadline; the connection is closed"),
    409: _error("an event id already received with different content; nothing written"),
    413: _error("body over the configured limit"),
    415: _error("the body is not declared as JSON"),
    422: _error("gateway events only: a valid event known not to apply, recorded in "
                "refused_deliveries and nothing else: unknown_user (create the user, then "
                "retry) or reference_of_other_user (it names another user's event)"),
    429: _retry("over the provider's rate limit (verified deliveries), or a source that "
                "keeps failing authentication"),
    503: _retry("the database is unreachable, or too many open connections; retry later"),
}

REQUEST_ID_PARAM = {"name": "X-Request-ID", "in": "header", "required": False,
                    "description": "trace id to carry (else the provider's delivery id)",
                    "schema": {"type": "string"}}


def header_param(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": True, "description": description,
            "schema": {"type": "string"}}


# The headers of a Standard Webhooks delivery, for the providers that sign so.
STANDARD_WEBHOOKS_HEADERS = [
    header_param("webhook-id", "message id, stable across retries"),
    header_param("webhook-timestamp", "Unix seconds of this attempt (within 5 minutes)"),
    header_param("webhook-signature", "space-separated v1,<base64> HMAC-SHA256 signatures"),
]

METRICS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus text exposition",
          "content": {"text/plain": {"schema": {"type": "string"}}}},
}

READY_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": HealthAnswer, "description": "the database answers"},
    503: _retry("the database is unreachable"),
}
