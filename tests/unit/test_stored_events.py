"""Only the outbox can credit: the rule a record on the payment topic is judged by
against its stored payment_events row (schema.stored_events.judge), the settlement
rule against the deposit the watcher decided (consumers/ledger/settlements.py),
and what the DLQ mirror takes a dead letter's content to be."""

from __future__ import annotations

import hashlib
import json
import sys
from decimal import Decimal

import pytest

from paystream.consumers.dead_letters.mirror import content_hash_of
from paystream.consumers.ledger.plan import read_event
from paystream.consumers.ledger.settlements import settlement_conflict
from paystream.consumers.records import Origin, Record
from paystream.finality.evidence import BlockRef
from paystream.finality.store import settlement_wire
from paystream.finality.verify import ChainOutcome, FinalityVerdict, reorged
from paystream.schema.chain import ExpectedDeposit
from paystream.schema.events import EventType, PaymentEvent
from paystream.schema.status import EventStatus
from paystream.schema.stored_events import StoredEvent, judge
from tests.unit.test_ledger_finality_plan import ASSET, CHAIN, DEPOSIT_ID, rec

EVENT = PaymentEvent("ev-1", EventType.DEPOSIT, "u1", "USDC", Decimal("10.5"), "payments")


def sha(wire: dict) -> str:
    """The content hash computed independently of schema.events: SHA-256 of the
    sorted, compact JSON (the bytes the ingest has always stored hashes of)."""
    return hashlib.sha256(json.dumps(wire, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


HASH = sha({"event_id": "ev-1", "event_type": "deposit", "user_id": "u1", "asset": "USDC",
            "amount": "10.5", "provider": "payments"})


def test_the_hash_a_record_is_judged_by_is_the_one_the_ingest_stores() -> None:
    assert EVENT.content_hash() == HASH
    assert read_event(rec(EVENT.to_wire())).event.content_hash() == HASH


def row(status: EventStatus, processed: bool = False, content_hash: str = HASH) -> StoredEvent:
    return StoredEvent(content_hash, status, processed)


@pytest.mark.parametrize(("stored", "reason"), [
    (None, "unknown_event"),
    (row(EventStatus.RECEIVED, content_hash=sha({"amount": "1000"})), "content_mismatch"),
    # Not applied yet: the outbox sent it (or a DLQ replay sent it again).
    (row(EventStatus.RECEIVED), None),
    # Processed, its outcome on record: a redelivery, the claim makes it a duplicate.
    (row(EventStatus.APPLIED, processed=True), None),
    (row(EventStatus.REJECTED, processed=True), None),
    (row(EventStatus.PENDING_FINALITY, processed=True), None),
    (row(EventStatus.CREDITED, processed=True), None),
    (row(EventStatus.REVERSED, processed=True), None),
    # Final, and no recorded outcome explains the record.
    (row(EventStatus.APPLIED), "status_conflict"),
    (row(EventStatus.REJECTED), "status_conflict"),
    (row(EventStatus.REORGED), "status_conflict"),
    # Waiting for an operator: only a replay (which sets it received) sends it again.
    (row(EventStatus.DEAD_LETTERED), "status_conflict"),
    (row(EventStatus.DEAD_LETTERED, processed=True), "status_conflict"),
])
def test_judge(stored: StoredEvent | None, reason: str | None) -> None:
    problem = judge("ev-1", HASH, stored)
    assert (problem[0] if problem else None) == reason
    if problem:
        assert "ev-1" in problem[1]


DEPOSIT = ExpectedDeposit.from_chain(DEPOSIT_ID, CHAIN)
FINAL = FinalityVerdict(ChainOutcome.FINAL, block=BlockRef(100, "0x" + "cd" * 32))
CONFIRMED = FinalityVerdict(ChainOutcome.CONFIRMED, block=BlockRef(100, "0x" + "cd" * 32))


def settlement(verdict: FinalityVerdict, credited: bool = False) -> PaymentEvent:
    return read_event(rec(settlement_wire(DEPOSIT, verdict, "u", ASSET, Decimal("1.5"),
                                          credited))).event


@pytest.mark.parametrize(("event", "state", "credited", "problem"), [
    # A settlement the watcher did not decide: the deposit is still where it was.
    (settlement(FINAL), "pending", False, "status_conflict"),
    (settlement(FINAL), "suspect", False, "status_conflict"),
    (settlement(FINAL), "reorging", False, "status_conflict"),
    (settlement(FINAL, credited=True), "credited", True, "status_conflict"),
    (settlement(reorged("x")), "pending", False, "status_conflict"),
    (settlement(reorged("x")), "finalizing", False, "status_conflict"),
    (settlement(reorged("x"), credited=True), "credited", True, "status_conflict"),
    # The decision, and its redelivery once applied.
    (settlement(FINAL), "finalizing", False, None),
    (settlement(FINAL), "final", False, None),
    (settlement(reorged("x")), "reorging", False, None),
    (settlement(reorged("x")), "reorged", False, None),
    (settlement(reorged("x"), credited=True), "reversing", True, None),
    (settlement(CONFIRMED), "crediting", False, None),
    (settlement(CONFIRMED), "pending", False, "deposit_not_crediting"),
])
def test_only_the_watchers_decision_explains_a_settlement(
        event: PaymentEvent, state: str, credited: bool, problem: str | None) -> None:
    assert settlement_conflict(event, state, credited) == problem


def dead(value: bytes | None) -> Record:
    return Record(Origin("dlq", 0, 1), b"u1", value, (), None)


def test_the_mirror_reads_the_dead_letters_content_hash() -> None:
    wire = EVENT.to_wire()
    assert content_hash_of(dead(json.dumps(wire).encode()), "ev-1") == HASH
    forged = {**wire, "amount": "1000000"}
    assert content_hash_of(dead(json.dumps(forged).encode()), "ev-1") == sha(forged) != HASH
    # Not that event, or not an event at all: no content to match.
    assert content_hash_of(dead(json.dumps(wire).encode()), "ev-2") is None
    assert content_hash_of(dead(b"not json"), "ev-1") is None
    assert content_hash_of(dead(None), "ev-1") is None
    # JSON nested deeper than the recursion limit (the default of 1,000, as in a consumer
    # process) is not an event either: RecursionError must not escape the mirror.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1_000)
    try:
        assert content_hash_of(dead(b"[" * 5_000 + b"]" * 5_000), "ev-1") is None
    finally:
        sys.setrecursionlimit(limit)
