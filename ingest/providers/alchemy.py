"""Alchemy Notify Address Activity, as the ingest serves it: at /webhooks/alchemy, its
HMAC over the raw body (ingest/alchemy_signature.py) under ALCHEMY_SIGNING_KEY, the
payload to deposit events and notices (ingest/alchemy.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field, model_validator

from paystream.env import EnvSettings
from paystream.ingest import alchemy, alchemy_signature
from paystream.ingest.api_schema import REQUEST_ID_PARAM, header_param
from paystream.ingest.recording import DeliveryWrite
from paystream.ingest.registry import Provider
from paystream.ingest.settings import IngestSettings, Keys, require_strong
from paystream.trace import Trace


class AlchemySettings(EnvSettings):
    """The Alchemy provider's (ingest/providers/alchemy.py): its signing key, refused
    at start when missing or shorter than 32 bytes."""

    doc_section = "Ingest"

    # HMAC keys, several during a rotation (any one of them may have signed a request).
    signing_keys: Keys = Field(
        (), alias="ALCHEMY_SIGNING_KEY", repr=False,
        json_schema_extra={"shown": "required"},
        description="Alchemy's signing key, ≥ 32 bytes; several separated by spaces or "
                    "commas during a rotation")

    @model_validator(mode="after")
    def _strong_keys(self) -> Self:
        require_strong(self, "signing_keys")
        return self


BODY = {
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

OPENAPI: dict[str, Any] = {
    "parameters": [
        header_param("X-Alchemy-Signature", "hex HMAC-SHA256 of the raw body"),
        REQUEST_ID_PARAM,
    ],
    "requestBody": {"required": True, "content": {"application/json": {"schema": BODY}}},
}


def _verify(raw: bytes, headers: Mapping[str, str], own: AlchemySettings,
            ingest: IngestSettings) -> None:
    alchemy_signature.verify(raw, headers.get(alchemy_signature.HEADER), own.signing_keys)


def _delivery(obj: Any, own: AlchemySettings, trace: Trace) -> DeliveryWrite:
    # Alchemy's delivery id names the trace before validation, so a refusal is
    # logged under the id the provider shows for it.
    trace.adopt_delivery_id(obj.get("id") if isinstance(obj, dict) else None)
    return alchemy.AlchemyWrite(alchemy.parse_delivery(obj), trace.trace_id)


PROVIDER = Provider(alchemy.PROVIDER, "/webhooks/alchemy", "Alchemy Notify Address Activity",
                    OPENAPI, AlchemySettings, _verify, _delivery)
