"""The OpenAPI description of the ingest (served at /docs and /openapi.json).

The webhook handlers read the raw body themselves (the signature covers the exact bytes,
so FastAPI must not parse it first); these models and fragments only document what the
handlers accept and answer, for readers and for schemathesis.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from paystream.schema.amounts import AMOUNT_PATTERN
from paystream.schema.event_types import gateway_types


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
    422: _error("payments only: a valid event known not to apply, recorded in "
                "refused_deliveries and nothing else: unknown_user (create the user, then "
                "retry) or reference_of_other_user (it names another user's event)"),
    429: _retry("over the provider's rate limit (verified deliveries), or a source that "
                "keeps failing authentication"),
    503: _retry("the database is unreachable, or too many open connections; retry later"),
}

REQUEST_ID_PARAM = {"name": "X-Request-ID", "in": "header", "required": False,
                    "description": "trace id to carry (else the provider's delivery id)",
                    "schema": {"type": "string"}}


def _header(name: str, description: str) -> dict[str, Any]:
    return {"name": name, "in": "header", "required": True, "description": description,
            "schema": {"type": "string"}}


ALCHEMY_BODY = {
    "type": "object",
    "required": ["type", "event"],
    "properties": {
        "webhookId": {"type": "string"},
        "id": {"type": "string", "description": "delivery id (whevt_...)"},
        "createdAt": {"type": "string"},
        "type": {"type": "string", "example": "ADDRESS_ACTIVITY"},
        "event": {
            "type": "object",
            "properties": {
                "network": {"type": "string", "example": "ETH_MAINNET"},
                "activity": {"type": "array", "items": {
                    "description": "a transfer; one that can never be credited (NFT, "
                                   "unknown address, removed log, incomplete, out of "
                                   "range) is answered 200 and kept as a notice"}},
                "error": {},
            },
        },
    },
}

ALCHEMY_OPENAPI: dict[str, Any] = {
    "parameters": [
        _header("X-Alchemy-Signature", "hex HMAC-SHA256 of the raw body"),
        REQUEST_ID_PARAM,
    ],
    "requestBody": {"required": True,
                    "content": {"application/json": {"schema": ALCHEMY_BODY}}},
}

PAYMENT_BODY = {
    "type": "object",
    "required": ["event_id", "event_type", "user_id", "amount"],
    "properties": {
        "event_id": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,200}$"},
        "event_type": {"type": "string", "enum": [t.value for t in gateway_types()]},
        "user_id": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,64}$"},
        "amount": {"type": "string", "pattern": f"^{AMOUNT_PATTERN.pattern}$",
                   "description": "decimal string: > 0, at most 18 decimals, below 10^20"},
        # No colon: chain assets (NETWORK:...) come only from chain providers.
        "asset": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,200}$",
                  "description": "one of PAYMENTS_ASSETS (default USD); any other asset "
                                 "is a 400 unsupported_asset"},
        "hold_id": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,200}$",
                    "description": "withdrawal_settled / withdrawal_failed: the event id of"
                                   " the withdrawal_requested whose hold it closes"},
        "reverses": {"type": "string", "pattern": "^[\\x21-\\x7e]{1,200}$",
                     "description": "refund / chargeback: the event id of the credit it"
                                    " reverses (at most its amount, minus earlier ones)"},
        "fee": {"type": "string", "pattern": f"^(0|{AMOUNT_PATTERN.pattern})$",
                "description": "withdrawal_requested: held with the amount;"
                               " withdrawal_settled: charged (at most the held fee)"},
        "invoice_id": {"type": "string", "pattern": "^inv_[0-9a-f]{32}$",
                       "description": "deposit only: the invoice it pays (same user and"
                                      " asset); a deposit naming an invoice it cannot pay"
                                      " still credits the user"},
    },
}

PAYMENTS_OPENAPI: dict[str, Any] = {
    "parameters": [
        _header("webhook-id", "message id, stable across retries"),
        _header("webhook-timestamp", "Unix seconds of this attempt (within 5 minutes)"),
        _header("webhook-signature", "space-separated v1,<base64> HMAC-SHA256 signatures"),
        REQUEST_ID_PARAM,
    ],
    "requestBody": {"required": True,
                    "content": {"application/json": {"schema": PAYMENT_BODY}}},
}

METRICS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus text exposition",
          "content": {"text/plain": {"schema": {"type": "string"}}}},
}

READY_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": HealthAnswer, "description": "the database answers"},
    503: _retry("the database is unreachable"),
}
