"""The payment gateway, as the ingest serves it: at /webhooks/payments, Standard
Webhooks signatures (ingest/standard_webhooks.py) under PAYMENTS_WEBHOOK_SECRET, the body
to one payment event in one of the assets it may credit (ingest/payments.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field, model_validator

from paystream.env import EnvSettings, SettingsError, Words
from paystream.ingest import payments, standard_webhooks
from paystream.ingest.api_schema import REQUEST_ID_PARAM, STANDARD_WEBHOOKS_HEADERS
from paystream.ingest.recording import DeliveryWrite
from paystream.ingest.registry import Provider
from paystream.ingest.settings import IngestSettings, StandardSecrets, require_strong
from paystream.schema.amounts import AMOUNT_PATTERN
from paystream.schema.event_types import gateway_types
from paystream.schema.events import ASSET_PATTERN
from paystream.trace import Trace


class PaymentsSettings(EnvSettings):
    """The payment gateway's (ingest/providers/payments.py): its Standard Webhooks
    secret, refused at start when missing, not base64 or shorter than 32 bytes decoded,
    and the assets it may credit."""

    doc_section = "Ingest"

    secrets: StandardSecrets = Field(
        (), alias="PAYMENTS_WEBHOOK_SECRET", repr=False,
        json_schema_extra={"shown": "required"},
        description="the gateway's Standard Webhooks secret, `whsec_<base64>`, ≥ 32 bytes "
                    "decoded; several allowed")
    default_asset: str = Field(
        "USD", alias="PAYMENTS_DEFAULT_ASSET",
        description="the asset of a gateway event that names none; must be in "
                    "`PAYMENTS_ASSETS`")
    # The only assets the gateway may credit. Chain assets ("NETWORK:...") never: they
    # come from chain providers and are spendable only once final.
    assets: Words = Field(
        ("USD",), alias="PAYMENTS_ASSETS",
        description="the only assets the gateway may credit, comma-separated; any other is "
                    "a 400 `unsupported_asset`; a chain asset (`NETWORK:…`) refuses to start")

    @model_validator(mode="after")
    def _strong_secrets_and_gateway_assets(self) -> Self:
        require_strong(self, "secrets")
        if ASSET_PATTERN.fullmatch(self.default_asset) is None:
            raise SettingsError(f"PAYMENTS_DEFAULT_ASSET is not a valid asset code: "
                                f"{self.default_asset!r}")
        if not self.assets:
            raise SettingsError("PAYMENTS_ASSETS names no asset")
        for asset in self.assets:
            if ASSET_PATTERN.fullmatch(asset) is None or ":" in asset:
                raise SettingsError(f"PAYMENTS_ASSETS: {asset!r} is not a gateway asset code"
                                    " (chain assets, NETWORK:..., are never allowed)")
        if self.default_asset not in self.assets:
            raise SettingsError(f"PAYMENTS_DEFAULT_ASSET {self.default_asset!r} is "
                                f"not in PAYMENTS_ASSETS {','.join(self.assets)}")
        return self


BODY = {
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

OPENAPI: dict[str, Any] = {
    "parameters": [*STANDARD_WEBHOOKS_HEADERS, REQUEST_ID_PARAM],
    "requestBody": {"required": True, "content": {"application/json": {"schema": BODY}}},
}


def _verify(raw: bytes, headers: Mapping[str, str], own: PaymentsSettings,
            ingest: IngestSettings) -> str:
    return standard_webhooks.verify(raw, headers, own.secrets,
                                    tolerance_s=ingest.timestamp_tolerance_s)


def _delivery(obj: Any, own: PaymentsSettings, trace: Trace) -> DeliveryWrite:
    event = payments.parse_payment(obj, own.default_asset, own.assets)
    return payments.PaymentWrite(event, trace.trace_id)


PROVIDER = Provider(payments.PROVIDER, "/webhooks/payments",
                    "Payment gateway (Standard Webhooks)", OPENAPI, PaymentsSettings,
                    _verify, _delivery)
