"""Pure rules of the shared contract: idempotency key, status transitions, event model."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paystream.schema.events import EventError, EventType, PaymentEvent, canonical_json, parse_wire
from paystream.schema.idempotency import idempotency_key
from paystream.schema.status import EventStatus, IllegalTransitionError, check_transition


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
    (lambda w: w.update(event_type="bonus"), "unknown_event_type"),
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


# Content hashes stored by earlier versions were taken of json.dumps(sort_keys=True)
# bytes: the fast path must produce exactly those bytes, or a redelivery would be a 409.
_text = st.text(st.characters(max_codepoint=0x2FF), max_size=20)  # ASCII, DEL, Latin
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), _text,
                     st.floats(allow_nan=False))
_wires = st.dictionaries(_text, st.one_of(
    _scalars, st.dictionaries(_text, _scalars, max_size=6),
    st.lists(_scalars, max_size=3)), max_size=8)


@given(_wires)
@settings(max_examples=400, deadline=None)
def test_canonical_json_is_json_dumps_sorted(wire):
    expected = json.dumps(wire, sort_keys=True, separators=(",", ":")).encode("ascii")
    assert canonical_json(wire) == expected


def test_canonical_json_of_a_chain_deposit_takes_the_fast_path_and_matches():
    event = PaymentEvent("ETH_MAINNET:0x" + "ab" * 32 + ":log:3", EventType.DEPOSIT, "u1",
                         "ETH_MAINNET:native", Decimal("1.5"), "alchemy",
                         chain={"network": "ETH_MAINNET", "block_number": 2**40,
                                "raw_value": hex(2**100), "removed": False,
                                "memo": "\x00\x1f\x7f\"\\/"})
    wire = event.to_wire()
    assert canonical_json(wire) == json.dumps(wire, sort_keys=True,
                                              separators=(",", ":")).encode()
    assert event.content_hash() == hashlib.sha256(canonical_json(wire)).hexdigest()


def test_a_payment_event_is_read_only_and_compares_by_value():
    one = PaymentEvent("e-1", EventType.DEPOSIT, "u", "USD", Decimal("1.5"), "p")
    same = PaymentEvent(event_id="e-1", event_type=EventType.DEPOSIT, user_id="u",
                        asset="USD", amount=Decimal("1.50"), provider="p")
    assert one == same and hash(one) == hash(same)
    assert one != PaymentEvent("e-1", EventType.DEPOSIT, "u", "USD", Decimal("2"), "p")
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.amount = Decimal("100")  # type: ignore[misc]
    assert one.amount == Decimal("1.5") and one.fee is None and one.chain is None
