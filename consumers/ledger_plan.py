"""Pure planning of a ledger batch: which event does what to which balance.

No I/O here, so the rules are unit-tested without a database: reading a record into an
event (or a deterministic failure), de-duplicating a batch, and walking the events in
offset order over the locked balances to decide each outcome and the net delta per
(user, asset).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum

from consumers.failures import PoisonError
from consumers.records import Record
from schema.events import EventError, PaymentEvent, parse_wire
from schema.idempotency import idempotency_key

Pair = tuple[str, str]  # (user_id, asset)
ZERO = Decimal(0)


class Outcome(StrEnum):
    """A processed event's outcome as stored in processed_events; final once written."""

    APPLIED = "applied"
    INSUFFICIENT_FUNDS = "insufficient_funds"
    # Chain deposits will wait for finality (issue: finality gating) as PENDING_FINALITY,
    # credited to `pending` instead of `balance`; `decide` is the one place to add it.


@dataclass(frozen=True)
class Candidate:
    record: Record
    event: PaymentEvent
    key: str  # idempotency_key(event_id, event_type)
    trace_id: str | None

    @property
    def pair(self) -> Pair:
        return (self.event.user_id, self.event.asset)


def read_event(record: Record) -> Candidate:
    """The record as a payment event; raise PoisonError if it can never be applied."""
    if record.value is None:
        raise PoisonError("empty_value", "the message has no value")
    try:
        obj = json.loads(record.value)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PoisonError("malformed_json", f"value is not JSON: {exc}") from None
    try:
        event = parse_wire(obj)
    except EventError as exc:
        raise PoisonError(exc.reason, exc.detail) from None
    headers = record.headers_named("event_id", "event_type", "trace_id")
    for header, expected in (("event_id", event.event_id),
                             ("event_type", event.event_type.value)):
        found = headers.get(header)
        if found is None:
            raise PoisonError("missing_header", f"header {header!r} is required")
        if found != expected:
            raise PoisonError("header_mismatch",
                              f"header {header}={found[:80]!r} but payload says {expected!r}")
    # The key decides the partition, and the partition decides the order of a user's
    # events: a key that is not the user id would break that order.
    if record.key_text != event.user_id:
        raise PoisonError("key_mismatch",
                          f"record key {record.key_text!r} is not the user id {event.user_id!r}")
    key = idempotency_key(event.event_id, event.event_type.value)
    return Candidate(record, event, key, headers.get("trace_id"))


def dedupe(candidates: Iterable[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
    """(first occurrence of each idempotency key in batch order, the repeats)."""
    seen: set[str] = set()
    unique: list[Candidate] = []
    repeats: list[Candidate] = []
    for candidate in candidates:
        if candidate.key in seen:
            repeats.append(candidate)
        else:
            seen.add(candidate.key)
            unique.append(candidate)
    return unique, repeats


def decide(event: PaymentEvent, available: Decimal) -> Outcome:
    """One event's outcome given the spendable balance just before it."""
    if event.event_type.is_credit:
        return Outcome.APPLIED
    return Outcome.APPLIED if available >= event.amount else Outcome.INSUFFICIENT_FUNDS


def signed_amount(event: PaymentEvent) -> Decimal:
    return event.amount if event.event_type.is_credit else -event.amount


@dataclass
class Plan:
    decisions: list[tuple[Candidate, Outcome]] = field(default_factory=list)
    # Net change per (user, asset); pairs whose changes cancel out are omitted.
    deltas: dict[Pair, Decimal] = field(default_factory=dict)
    # Balance after the batch per touched pair (the invariant checks use it).
    closing: dict[Pair, Decimal] = field(default_factory=dict)

    def with_outcome(self, outcome: Outcome) -> list[Candidate]:
        return [c for c, o in self.decisions if o is outcome]

    def sorted_deltas(self) -> list[tuple[Pair, Decimal]]:
        """Non-zero deltas in (user_id, asset) order, the order the rows are locked in."""
        return [(pair, d) for pair, d in sorted(self.deltas.items()) if d != ZERO]


def plan_batch(candidates: Sequence[Candidate], opening: dict[Pair, Decimal]) -> Plan:
    """Walk `candidates` in batch order (offset order per user) over `opening` balances.

    A debit sees every credit and debit before it in the batch, so a withdrawal after a
    deposit in the same batch is funded by it; a debit that would go below zero gets
    INSUFFICIENT_FUNDS and changes nothing.
    """
    plan = Plan()
    running: dict[Pair, Decimal] = {}
    for candidate in candidates:
        pair = candidate.pair
        available = running.get(pair, opening.get(pair, ZERO))
        outcome = decide(candidate.event, available)
        plan.decisions.append((candidate, outcome))
        if outcome is Outcome.APPLIED:
            delta = signed_amount(candidate.event)
            running[pair] = available + delta
            plan.deltas[pair] = plan.deltas.get(pair, ZERO) + delta
        else:
            running[pair] = available
    plan.closing = running
    return plan
