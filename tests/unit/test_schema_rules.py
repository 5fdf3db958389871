"""Pure rules of the shared contract: idempotency key, status transitions, event model."""

from __future__ import annotations

from decimal import Decimal

import pytest

from schema.events import EventError, EventType, PaymentEvent, parse_wire
from schema.idempotency import idempotency_key
from schema.status import EventStatus, IllegalTransitionError, check_transition


def test_idempotency_key_is_length_prefixed():
    # Plain concatenation would make these two pairs collide.
    assert idempotency_key("ab", "c") != idempotency_key("a", "bc")
    assert idempotency_key("e1", "deposit") == idempotency_key("e1", "deposit")
    assert len(idempotency_key("e1", "deposit")) == 64


@pytest.mark.parametrize(("cur", "tgt"), [
    ("received", "applied"), ("received", "rejected"), ("received", "dead_lettered"),
    ("dead_lettered", "received"), ("received", "pending_finality"),
    ("pending_finality", "applied"), ("pending_finality", "reorged"),
    ("pending_finality", "credited"), ("credited", "applied"), ("credited", "reversed"),
])
def test_allowed_transitions(cur, tgt):
    check_transition(cur, tgt)


@pytest.mark.parametrize(("cur", "tgt"), [
    ("applied", "received"), ("applied", "rejected"), ("rejected", "applied"),
    ("dead_lettered", "applied"), ("received", "received"),
    ("received", "reorged"), ("reorged", "applied"), ("applied", "reorged"),
    ("pending_finality", "rejected"), ("reorged", "pending_finality"),
    # Credited money is only ever taken back by a reversal; reversed is final.
    ("credited", "reorged"), ("credited", "pending_finality"), ("pending_finality",
                                                                "reversed"),
    ("applied", "reversed"), ("reversed", "applied"), ("reversed", "credited"),
    ("received", "credited"),
])
def test_forbidden_transitions(cur, tgt):
    with pytest.raises(IllegalTransitionError):
        check_transition(EventStatus(cur), EventStatus(tgt))


def test_wire_round_trip_keeps_amount_exact_and_a_string():
    event = PaymentEvent("e-1", EventType.WITHDRAWAL, "u-1", "USD",
                         Decimal("0.000000000000000001"), "payments")
    wire = event.to_wire()
    assert wire["amount"] == "0.000000000000000001"
    assert parse_wire(wire) == event


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda w: w.pop("user_id"), "missing_field"),
    (lambda w: w.update(event_type="refund"), "unknown_event_type"),
    (lambda w: w.update(amount=50.1), "invalid_amount"),
    (lambda w: w.update(amount="-1"), "invalid_amount"),
    (lambda w: w.update(user_id="bad id with spaces"), "malformed"),
])
def test_parse_wire_names_the_reason(mutate, reason):
    wire = PaymentEvent("e-2", EventType.DEPOSIT, "u-2", "USD", Decimal("1"), "p").to_wire()
    mutate(wire)
    with pytest.raises(EventError) as info:
        parse_wire(wire)
    assert info.value.reason == reason


def test_content_hash_tells_conflicts_from_duplicates():
    a = PaymentEvent("e-3", EventType.DEPOSIT, "u", "USD", Decimal("1.0"), "p")
    b = PaymentEvent("e-3", EventType.DEPOSIT, "u", "USD", Decimal("1"), "p")
    c = PaymentEvent("e-3", EventType.DEPOSIT, "u", "USD", Decimal("2"), "p")
    assert a.content_hash() == b.content_hash()  # same amount, other spelling
    assert a.content_hash() != c.content_hash()
