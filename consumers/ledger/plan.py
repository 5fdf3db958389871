"""Pure planning of a ledger batch: which event does what to which balance.

No I/O here, so the rules are unit-tested without a database: reading a record into an
event (or a deterministic failure), de-duplicating a batch, and walking the events in
offset order over the locked balances to decide each outcome and the net delta per
(user, asset) in each book.

Each user has three accounts per asset (schema/accounts.py): `available` (copied in
balances.balance), `pending` (balances.pending) and `held` (balances.held). Every event
that moves money is one transfer of postings that sum to zero (the rule table, with the
platform's side, is consumers/ledger/postings.py). What each event does to the user's
two books:

  event                          outcome            available   pending
  deposit / airdrop (no chain)   applied            +amount
  chain deposit (has `chain`)    pending_finality               +amount
  deposit_finalized              applied            +amount     -amount
  deposit_reorged                reorged                        -amount
  deposit_credited               credited           +amount     -amount
  deposit_finalized (credited)   applied            (nothing: credited already)
  deposit_reversed               applied            -amount      (available covers it)
                                 shortfall          -available   (the rest is owed)
  withdrawal / withdrawal_fee    applied            -amount      (only if available
                                 insufficient_funds              covers it)
                                 account_flagged                 (user has a shortfall)

A withdrawal therefore only ever spends available funds: pending money is visible but
not spendable until its deposit is final (or, on a network with a credit depth, deep
enough to be credited: deposit_credited).

A reversal is never clamped silently: it takes what available holds, never below zero,
and the rest is a shortfall (account_shortfalls). A user with an open shortfall is
FLAGGED: every debit of that user, in any asset, is refused until it is resolved, from
the event after the reversal on (within the batch too).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, localcontext
from typing import NamedTuple

import orjson

from paystream.consumers.failures import PoisonError
from paystream.consumers.ledger.postings import (
    EXACT,
    Posting,
    postings,
    reversal_split,
)
from paystream.consumers.records import Record
from paystream.schema.accounts import AccountKind, AccountRef
from paystream.schema.balances import BalanceKey
from paystream.schema.chain import DepositError, ExpectedDeposit
from paystream.schema.event_types import Reach, Shape
from paystream.schema.events import (
    EventError,
    EventType,
    PaymentEvent,
    SettlementType,
    parse_wire,
)
from paystream.schema.holds import Hold, HoldState
from paystream.schema.idempotency import idempotency_key
from paystream.schema.processed_events import Outcome
from paystream.schema.reversals import Original

ZERO = Decimal(0)
# Exact arithmetic for the plan's sums. The default context keeps 28 significant digits:
# 0 + 99999999999999999999.999999999999999999 (a valid NUMERIC(38,18) amount) became
# 1E+20 and overflowed the column, and a balance past 10^10 with 18 decimals was rounded.
# 60 digits hold any sum of a batch of amounts below 10^20 with 18 decimals exactly.
# The postings' context (one owner): postings() skips its own inside this one.
PLAN_CONTEXT = EXACT


class Candidate(NamedTuple):
    """A record read as an event (a tuple: built once per record on the hot path, at a
    third of a frozen dataclass's cost)."""

    record: Record
    event: PaymentEvent
    key: str  # idempotency_key(event_id, event_type)
    trace_id: str | None

    @property
    def pair(self) -> BalanceKey:
        return (self.event.user_id, self.event.asset)

    @property
    def source(self) -> tuple[str, int]:
        """The topic and partition the record was read from."""
        return (self.record.origin.topic, self.record.origin.partition)


def read_event(record: Record) -> Candidate:
    """The record as a payment event; raise PoisonError if it can never be applied."""
    if record.value is None:
        raise PoisonError("empty_value", "the message has no value")
    try:
        obj = _loads(record.value)
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
        # header_text unquotes a value that reads as a JSON string (a JSON header
        # converter's form), so an event id that is itself quoted ('"abc"', a valid id)
        # must also be compared as the raw text Connect's header converter wrote.
        if found != expected and _raw_header(record, header) != expected:
            raise PoisonError("header_mismatch",
                              f"header {header}={found[:80]!r} but payload says {expected!r}")
    # The key decides the partition, and the partition decides the order of a user's
    # events: a key that is not the user id would break that order.
    if record.key_text != event.user_id:
        raise PoisonError("key_mismatch",
                          f"record key {record.key_text!r} is not the user id {event.user_id!r}")
    if event.is_chain_deposit:
        # The finality watcher must be able to judge it: refuse an unusable identity now.
        try:
            ExpectedDeposit.from_chain(event.event_id, event.chain or {})
        except DepositError as exc:
            raise PoisonError("invalid_chain_identity", str(exc)) from None
    key = idempotency_key(event.event_id, event.event_type.value)
    return Candidate(record, event, key, headers.get("trace_id"))


def _loads(value: bytes) -> object:
    """orjson first (a fifth of json's time on the hot path); what orjson refuses and
    json reads (an integer past 64 bits, NaN) is read by json, so no record's fate
    depends on which parser ran."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return json.loads(value)


def _raw_header(record: Record, name: str) -> str | None:
    """The last value of header `name` as its raw UTF-8 text."""
    found = [value for key, value in record.headers if key == name]
    return found[-1].decode("utf-8", "replace") if found and found[-1] is not None else None


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


def decide(event: PaymentEvent, available: Decimal, flagged: bool = False) -> Outcome:
    """One event's outcome given the spendable balance just before it and whether the
    user is flagged (an open shortfall)."""
    if event.event_type is SettlementType.DEPOSIT_FINALIZED:
        return Outcome.APPLIED
    if event.event_type is SettlementType.DEPOSIT_REORGED:
        return Outcome.REORGED
    if event.event_type is SettlementType.DEPOSIT_CREDITED:
        return Outcome.CREDITED
    if event.event_type is SettlementType.DEPOSIT_REVERSED:
        return Outcome.APPLIED if available >= event.amount else Outcome.SHORTFALL
    if event.is_chain_deposit:
        return Outcome.PENDING_FINALITY
    if event.event_type.is_credit:
        return Outcome.APPLIED
    if flagged:
        return Outcome.ACCOUNT_FLAGGED
    return Outcome.APPLIED if available >= event.amount else Outcome.INSUFFICIENT_FUNDS


OPERATOR = "operator"


@dataclass
class References:
    """What the batch's holds and reversals name, as the database holds them: the holds
    (locked) and the originals with what earlier reversals took back."""

    holds: dict[str, Hold] = field(default_factory=dict)
    originals: dict[str, Original] = field(default_factory=dict)


def decide_second_phase(event: PaymentEvent, available: Decimal, flagged: bool,
                        hold: Hold | None, original: Original | None,
                        original_applied: bool, remaining: Decimal) -> Outcome:
    """The outcome of a hold, a hold's close, a reversal or a forced debit (by its
    shape), given what it names (`hold` open or closed; `original`, applied or not,
    `remaining` of it)."""
    kind = event.event_type
    assert isinstance(kind, EventType) and kind.second_phase, kind
    shape = kind.shape
    if shape is Shape.HOLD:
        if flagged:
            return Outcome.ACCOUNT_FLAGGED
        needed = event.amount + (event.fee or ZERO)
        return Outcome.APPLIED if available >= needed else Outcome.INSUFFICIENT_FUNDS
    if shape is Shape.FORCED_DEBIT:
        return Outcome.APPLIED if available >= event.amount else Outcome.SHORTFALL
    if kind.closes_hold:
        if hold is None or not hold.state.is_open or (hold.user_id, hold.asset) != (
                event.user_id, event.asset):
            return Outcome.HOLD_NOT_OPEN
        if event.amount > hold.amount or (event.fee or ZERO) > hold.fee:
            return Outcome.EXCEEDS_HOLD
        return Outcome.APPLIED
    assert kind.is_reversal, kind
    # A gateway may reverse only its own credits, an operator any credit or debit (a
    # chain deposit is the finality watcher's to reverse).
    then = original.event if original is not None else None
    if (then is None or not original_applied or then.is_chain_deposit
            or not isinstance(then.event_type, EventType)
            or not kind.may_reverse(then.event_type)
            or (then.user_id, then.asset) != (event.user_id, event.asset)
            or (kind.reverses is Reach.GATEWAY_CREDITS and then.provider != event.provider)):
        return Outcome.INVALID_REVERSAL
    if event.amount > remaining:
        return Outcome.EXCEEDS_ORIGINAL
    credit_taken_back = then.event_type.is_credit
    return (Outcome.SHORTFALL if credit_taken_back and available < event.amount
            else Outcome.APPLIED)


def is_second_phase(event: PaymentEvent) -> bool:
    """A hold, a hold's close, a reversal or a forced debit (decide_second_phase)."""
    return event.event_type.second_phase


def effects(event: PaymentEvent, outcome: Outcome, available: Decimal = ZERO,
            network: str | None = None) -> tuple[Decimal, Decimal]:
    """(available delta, pending delta) of an event with `outcome`: what its postings
    (postings.py) do to the user's two books; `available` (just before it)
    only matters to a reversal's shortfall."""
    moved = postings(event, outcome, available, network)
    return (_user_delta(moved, AccountKind.AVAILABLE), _user_delta(moved, AccountKind.PENDING))


def _user_delta(moved: list[Posting], kind: AccountKind) -> Decimal:
    return sum((amount for ref, amount in moved if ref.kind is kind), ZERO)


def signed_amount(event: PaymentEvent) -> Decimal:
    """The available-book delta of an applied event."""
    return effects(event, Outcome.APPLIED)[0]


@dataclass
class Plan:
    decisions: list[tuple[Candidate, Outcome]] = field(default_factory=list)
    # Net change of the available balance per (user, asset).
    deltas: dict[BalanceKey, Decimal] = field(default_factory=dict)
    # Net change of the pending balance per (user, asset) (chain deposits).
    pending_deltas: dict[BalanceKey, Decimal] = field(default_factory=dict)
    # Net change of the held balance per (user, asset) (withdrawals in flight).
    held_deltas: dict[BalanceKey, Decimal] = field(default_factory=dict)
    # One transfer per event that moves money: (candidate, its postings), batch order.
    transfers: list[tuple[Candidate, list[Posting]]] = field(default_factory=list)
    # Balance after the batch per touched pair (the invariant checks use it).
    closing: dict[BalanceKey, Decimal] = field(default_factory=dict)
    # Reversals available could not cover: (candidate, amount owed).
    shortfalls: list[tuple[Candidate, Decimal]] = field(default_factory=list)
    # Holds placed, and closed: (hold id, final state, closing event, amount, fee).
    placed_holds: list[Hold] = field(default_factory=list)
    closed_holds: list[tuple[str, HoldState, str, Decimal | None, Decimal | None]] = \
        field(default_factory=list)
    # Applied reversals: (event id, original event id, amount).
    reversals: list[tuple[str, str, Decimal]] = field(default_factory=list)

    def with_outcome(self, outcome: Outcome) -> list[Candidate]:
        return [c for c, o in self.decisions if o is outcome]

    def sorted_deltas(self) -> list[tuple[BalanceKey, Decimal]]:
        """Non-zero deltas in (user_id, asset) order, the order the rows are locked in."""
        return [(pair, d) for pair, d in sorted(self.deltas.items()) if d != ZERO]

    def sorted_pending_deltas(self) -> list[tuple[BalanceKey, Decimal]]:
        return [(pair, d) for pair, d in sorted(self.pending_deltas.items()) if d != ZERO]

    def sorted_held_deltas(self) -> list[tuple[BalanceKey, Decimal]]:
        return [(pair, d) for pair, d in sorted(self.held_deltas.items()) if d != ZERO]

    @property
    def touched(self) -> set[BalanceKey]:
        return set(self.deltas) | set(self.pending_deltas) | set(self.held_deltas)

    @property
    def accounts(self) -> set[AccountRef]:
        """Every account the batch's transfers post to."""
        return {ref for _, moved in self.transfers for ref, _ in moved}


def plan_batch(candidates: Sequence[Candidate], opening: dict[BalanceKey, Decimal],
               flagged: Iterable[str] = (), networks: Mapping[str, str] | None = None,
               references: References | None = None) -> Plan:
    """Walk `candidates` in batch order (offset order per user) over `opening` balances.

    A debit sees every credit and debit before it in the batch, so a withdrawal after a
    deposit in the same batch is funded by it; a debit that would go below zero gets
    INSUFFICIENT_FUNDS and changes nothing. A chain deposit only moves `pending`, so it
    funds nothing until its deposit_finalized (or deposit_credited) moves it to
    available. `flagged` are the users with an open shortfall before the batch; a
    reversal that leaves a shortfall flags its user for the rest of the batch.
    `networks`: the network of each held deposit a settlement names (custody's owner);
    `references`: the holds and originals the batch's second-phase events name. A hold
    placed or closed, or an event applied, earlier in the batch counts as such.
    """
    with localcontext(PLAN_CONTEXT):
        return _plan(candidates, opening, flagged, networks or {}, references or References())


def _plan(candidates: Sequence[Candidate], opening: dict[BalanceKey, Decimal],
          flagged: Iterable[str], networks: Mapping[str, str], refs: References) -> Plan:
    plan = Plan()
    holds_now = dict(refs.holds)
    remaining = {event_id: o.remaining for event_id, o in refs.originals.items()}
    applied_here: set[str] = set()
    books = {AccountKind.AVAILABLE: plan.deltas, AccountKind.PENDING: plan.pending_deltas,
             AccountKind.HELD: plan.held_deltas}
    running: dict[BalanceKey, Decimal] = {}
    flagged_users = set(flagged)
    for candidate in candidates:
        pair = candidate.pair
        available = running.get(pair, opening.get(pair, ZERO))
        event = candidate.event
        is_flagged = event.user_id in flagged_users
        hold = holds_now.get(event.reference) if event.reference is not None else None
        original = refs.originals.get(event.reference) if event.reference else None
        if is_second_phase(event):
            outcome = decide_second_phase(
                event, available, is_flagged, hold, original,
                original is not None and (original.status == "applied"
                                          or original.event.event_id in applied_here),
                remaining.get(event.reference or "", ZERO))
        else:
            outcome = decide(event, available, is_flagged)
        plan.decisions.append((candidate, outcome))
        moved = postings(event, outcome, available, _network(candidate, networks), hold,
                         original.event if original is not None else None)
        if outcome is Outcome.APPLIED and isinstance(event.event_type, EventType):
            applied_here.add(event.event_id)
        _follow_references(plan, candidate, outcome, hold, holds_now, remaining)
        if outcome is Outcome.SHORTFALL:
            owed = reversal_split(candidate.event.amount, available)[1]
            plan.shortfalls.append((candidate, owed))
            flagged_users.add(candidate.event.user_id)
        running[pair] = available
        if moved:
            plan.transfers.append((candidate, moved))
        for ref, amount in moved:
            book = books.get(ref.kind)
            if book is not None:  # one of the user's accounts: its balances column
                book[pair] = book.get(pair, ZERO) + amount
                if ref.kind is AccountKind.AVAILABLE:
                    running[pair] += amount
    plan.closing = running
    return plan


def _follow_references(plan: Plan, candidate: Candidate, outcome: Outcome, hold: Hold | None,
                       holds_now: dict[str, Hold], remaining: dict[str, Decimal]) -> None:
    """The holds placed and closed and the reversals applied by one event, into the plan
    and into the batch's running view of them (a later event of the batch sees them)."""
    event, kind = candidate.event, candidate.event.event_type
    if outcome.is_rejection or not isinstance(kind, EventType):
        return
    if kind.shape is Shape.HOLD:
        placed = Hold(event.event_id, event.user_id, event.asset, event.provider,
                      event.amount, event.fee or ZERO, HoldState.HELD)
        plan.placed_holds.append(placed)
        holds_now[event.event_id] = placed
    elif kind.closes_hold and hold is not None:
        state = kind.hold_state
        assert state is not None, kind
        settled = kind.shape is Shape.HOLD_SETTLE
        fee = (hold.fee if event.fee is None else event.fee) if settled else None
        plan.closed_holds.append((hold.hold_id, state, event.event_id,
                                  event.amount if settled else None, fee))
        holds_now[hold.hold_id] = replace(hold, state=state)
    elif kind.is_reversal and event.reference is not None:
        plan.reversals.append((event.event_id, event.reference, event.amount))
        remaining[event.reference] = remaining.get(event.reference, ZERO) - event.amount


def _network(candidate: Candidate, networks: Mapping[str, str]) -> str | None:
    """The chain a chain deposit is on, or the one of the deposit a settlement names."""
    event = candidate.event
    if event.settles is not None:
        return networks.get(event.settles)
    if event.is_chain_deposit:
        return str((event.chain or {}).get("network"))
    return None
