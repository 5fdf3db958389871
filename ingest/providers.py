"""The webhook providers the ingest serves, one entry each: the only list the routes
(webhooks.py), the app's dispatch and metrics (app.py) and /docs (routes_webhooks.py)
read.

A provider is its path, how its signature is checked on the raw bytes, how a verified
JSON body becomes the DeliveryWrite the group commit runs (ingest/recording.py), and
its OpenAPI description. Adding one: a module with its parser and DeliveryWrite (as
alchemy.py, payments.py), its signing secret in settings.py, its body in api_schema.py,
and an entry here; docs/ingest.md#adding-a-provider walks through it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from paystream.ingest import alchemy, alchemy_signature, api_schema, payments, standard_webhooks
from paystream.ingest.recording import DeliveryWrite
from paystream.ingest.settings import IngestSettings
from paystream.trace import Trace

# The signature check: raw body, headers (lower-case names), settings; raises
# SignatureError (401).
Verify = Callable[[bytes, Mapping[str, str], IngestSettings], object]
# The verified body, parsed as JSON but not yet validated, to its write; raises
# PayloadError (400) naming the broken field.
Delivery = Callable[[Any, IngestSettings, Trace], DeliveryWrite]


@dataclass(frozen=True)
class Provider:
    name: str        # the `provider` label of metrics and logs
    path: str        # POST here
    summary: str     # /docs
    openapi: dict[str, Any]
    verify: Verify
    delivery: Delivery


def _alchemy_delivery(obj: Any, settings: IngestSettings, trace: Trace) -> DeliveryWrite:
    # Alchemy's delivery id names the trace before validation, so a refusal is
    # logged under the id the provider shows for it.
    trace.adopt_delivery_id(obj.get("id") if isinstance(obj, dict) else None)
    return alchemy.AlchemyWrite(alchemy.parse_delivery(obj), trace.trace_id)


def _payments_delivery(obj: Any, settings: IngestSettings, trace: Trace) -> DeliveryWrite:
    event = payments.parse_payment(obj, settings.payments_default_asset,
                                   settings.payments_assets)
    return payments.PaymentWrite(event, trace.trace_id)


PROVIDERS: tuple[Provider, ...] = (
    Provider(
        alchemy.PROVIDER, "/webhooks/alchemy", "Alchemy Notify Address Activity",
        api_schema.ALCHEMY_OPENAPI,
        lambda raw, headers, s: alchemy_signature.verify(
            raw, headers.get(alchemy_signature.HEADER), s.alchemy_signing_keys),
        _alchemy_delivery),
    Provider(
        payments.PROVIDER, "/webhooks/payments", "Payment gateway (Standard Webhooks)",
        api_schema.PAYMENTS_OPENAPI,
        lambda raw, headers, s: standard_webhooks.verify(
            raw, headers, s.payments_secrets, tolerance_s=s.timestamp_tolerance_s),
        _payments_delivery),
)
BY_PATH: dict[str, Provider] = {p.path: p for p in PROVIDERS}
