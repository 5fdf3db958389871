"""Request and answer bodies of the endpoint routes (api/routes_endpoints.py)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from paystream.api.models import Strict
from paystream.notify.endpoints import MAX_URL_LENGTH
from paystream.notify.merchant_endpoints import DESCRIPTION_MAX


class NewEndpoint(Strict):
    url: str = Field(min_length=1, max_length=MAX_URL_LENGTH, examples=[
        "https://merchant.example/webhooks"], description=(
        "https, never an address inside our network (the SSRF guard, checked again at"
        " every send)"))
    event_types: list[str] = Field(default_factory=list, max_length=50, description=(
        "filters: a type (deposit.credited), a family (deposit.*) or *; none: every type"))
    description: str | None = Field(None, max_length=DESCRIPTION_MAX)
    merchant_id: str | None = Field(None, pattern="^m_[0-9a-z_]{1,40}$", description=(
        "an operator's key: the merchant the endpoint belongs to"))


class EndpointChange(Strict):
    url: str | None = Field(None, min_length=1, max_length=MAX_URL_LENGTH)
    event_types: list[str] | None = Field(None, max_length=50)
    description: str | None = Field(None, max_length=DESCRIPTION_MAX)
    enabled: bool | None = Field(None, description="false disables; true enables again and"
                                                   " forgets the failing run")


class Endpoint(Strict):
    endpoint_id: str
    url: str
    event_types: list[str]
    description: str | None
    merchant_id: str | None
    enabled: bool
    disabled_at: datetime | None
    disabled_reason: str | None = Field(description="why: by whom, or the failing run")
    failing_since: datetime | None
    created_at: datetime


class NewEndpointAnswer(Endpoint):
    secret: str = Field(description="the whsec_ signing secret (Standard Webhooks); also"
                                    " at GET /v1/endpoints/{id}/secret")


class Endpoints(Strict):
    items: list[Endpoint]
    next_cursor: str | None


class Secret(Strict):
    endpoint_id: str
    secret: str
    previous_secret_until: datetime | None = Field(
        description="after a rotation: until then the previous secret signs too")


class Attempt(Strict):
    attempt_id: int
    delivery_id: str = Field(description="POST /v1/deliveries/{delivery_id}/redeliver")
    event_type: str
    attempt: int
    at: datetime
    latency_ms: float
    status_code: int | None = Field(description="null: no answer (timeout, refused)")
    error: str | None
    response_head: str | None = Field(description="the answer's first 256 bytes")
    delivery_state: str = Field(description="pending, delivered or failed")


class Attempts(Strict):
    items: list[Attempt]
    next_cursor: str | None


class Redelivery(Strict):
    delivery_id: str
    state: str
    was: str


class Recover(Strict):
    since: datetime = Field(description="failed deliveries made since this moment")


class Recovered(Strict):
    endpoint_id: str
    since: str
    redelivering: int


class TestSent(Strict):
    endpoint_id: str
    delivery_id: str
    intent_id: str
