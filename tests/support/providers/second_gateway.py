"""A second payment gateway signing with Standard Webhooks: a provider declared in this
module and nowhere else, as the product's are in ingest/providers/. The tests that serve
it (tests/integration/test_ingest_provider_one_module.py) prove that a provider is one
module: its path, its signature check, its parser, its OpenAPI and its settings.

It names its fields its own way (`id`, `type`, `customer`, `amount`, `currency`), sends
ids that are its own (stored under `gateway_two:`, so they cannot meet the first
gateway's), and reuses the first gateway's checks of each value and its write.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field, model_validator

from paystream.env import EnvSettings
from paystream.ingest import payments, standard_webhooks
from paystream.ingest.api_schema import REQUEST_ID_PARAM, STANDARD_WEBHOOKS_HEADERS
from paystream.ingest.errors import PayloadError
from paystream.ingest.recording import DeliveryWrite
from paystream.ingest.registry import Provider
from paystream.ingest.settings import IngestSettings, StandardSecrets, require_strong
from paystream.schema.events import PaymentEvent
from paystream.trace import Trace

NAME = "gateway_two"
PATH = "/webhooks/gateway-two"
ID_PREFIX = f"{NAME}:"
# Its field -> the first gateway's (ingest/payments.py), which checks the value.
FIELDS = {"id": "event_id", "type": "event_type", "customer": "user_id",
          "amount": "amount", "currency": "asset"}
REQUIRED = ("id", "type", "customer", "amount")


class GatewayTwoSettings(EnvSettings):
    secrets: StandardSecrets = Field((), alias="GATEWAY_TWO_WEBHOOK_SECRET", repr=False)
    assets: tuple[str, ...] = ("USD", "EUR")

    @model_validator(mode="after")
    def _strong_secrets(self) -> Self:
        require_strong(self, "secrets")
        return self


BODY = {
    "type": "object",
    "required": list(REQUIRED),
    "properties": {
        "id": {"type": "string"},
        "type": {"type": "string", "enum": ["deposit", "withdrawal_requested"]},
        "customer": {"type": "string"},
        "amount": {"type": "string"},
        "currency": {"type": "string", "enum": ["USD", "EUR"]},
    },
}
OPENAPI: dict[str, Any] = {
    "parameters": [*STANDARD_WEBHOOKS_HEADERS, REQUEST_ID_PARAM],
    "requestBody": {"required": True, "content": {"application/json": {"schema": BODY}}},
}


def parse(obj: Any, assets: tuple[str, ...]) -> PaymentEvent:
    """Its body as a payment event; PayloadError naming its own field."""
    if not isinstance(obj, dict):
        raise PayloadError("the payload must be a JSON object")
    for name in REQUIRED:
        if obj.get(name) is None:
            raise PayloadError(f"{name} is required", code="missing_field")
    if not isinstance(obj["id"], str):
        raise PayloadError("id must be a string")
    body = {ours: obj[theirs] for theirs, ours in FIELDS.items() if theirs in obj}
    body["event_id"] = ID_PREFIX + obj["id"]
    return payments.parse_payment(body, assets[0], assets, provider=NAME)


def _verify(raw: bytes, headers: Mapping[str, str], own: GatewayTwoSettings,
            ingest: IngestSettings) -> str:
    return standard_webhooks.verify(raw, headers, own.secrets,
                                    tolerance_s=ingest.timestamp_tolerance_s)


def _delivery(obj: Any, own: GatewayTwoSettings, trace: Trace) -> DeliveryWrite:
    return payments.PaymentWrite(parse(obj, own.assets), trace.trace_id)


PROVIDER = Provider(NAME, PATH, "The second gateway (Standard Webhooks)", OPENAPI,
                    GatewayTwoSettings, _verify, _delivery)
