"""The ingest's one delivery-write contract: both providers implement it, and the group
commit runs consecutive deliveries of one provider together."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from paystream.ingest import alchemy
from paystream.ingest.payments import PaymentWrite
from paystream.ingest.recording import DeliveryWrite
from paystream.ingest.store import _runs
from paystream.schema.events import EventType, PaymentEvent
from tests.support.ingest import alchemy_body, eth_activity


def _payment(n: int) -> PaymentWrite:
    return PaymentWrite(PaymentEvent(f"ev-{n}", EventType.DEPOSIT, "u1", "USD", Decimal(n),
                                     "payments"), f"trace-{n}")


def _alchemy() -> alchemy.AlchemyWrite:
    body = alchemy_body([eth_activity("0x" + "ab" * 20, 10**18)])
    return alchemy.AlchemyWrite(alchemy.parse_delivery(json.loads(body)), "trace-a")


def _probe(cur: Any) -> None:
    """A plain work (the readiness probe's kind): never grouped."""


def test_both_providers_implement_the_contract() -> None:
    assert isinstance(_payment(1), DeliveryWrite)
    assert isinstance(_alchemy(), DeliveryWrite)
    with pytest.raises(TypeError):
        DeliveryWrite()  # type: ignore[abstract]


def test_consecutive_deliveries_of_one_provider_form_one_run() -> None:
    p1, p2, p3, a1, a2 = _payment(1), _payment(2), _payment(3), _alchemy(), _alchemy()
    runs = _runs([p1, p2, a1, a2, _probe, p3, _probe])
    assert runs == [[p1, p2], [a1, a2], _probe, [p3], _probe]


def test_a_group_of_plain_works_runs_each_alone() -> None:
    assert _runs([_probe, _probe]) == [_probe, _probe]
    assert _runs([]) == []
