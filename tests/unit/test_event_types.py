"""The event types' declarations (schema/event_types/): each type declared once, what the
other parts read from them equal to the lists they used to keep by hand, declarations
that contradict their shape refused, and a type declared in a test alone (cashback,
tests/support/cashback.py) accepted by the ingest, planned and posted by the ledger,
and notified, with no other file changed."""

from __future__ import annotations

import pickle
import re
from decimal import Decimal
from types import ModuleType

import pytest

from paystream.consumers.ledger.plan import Outcome, plan_batch, read_event
from paystream.consumers.ledger.postings import postings
from paystream.ingest.errors import PayloadError
from paystream.ingest.payments import parse_payment
from paystream.notify.intents import IntentType, of_outcome
from paystream.schema.accounts import AccountKind, AccountRef
from paystream.schema.event_types import (
    FEES,
    SETTLEMENT,
    EventType,
    Shape,
    adjustments,
    declare,
    deposits,
    gateway_types,
    reversals,
    withdrawals,
)
from paystream.schema.events import SettlementType, parse_wire
from paystream.schema.holds import HoldState
from paystream.schema.migrate import migration_files
from tests.support.cashback import cashback_declared
from tests.support.consumers import record_of, wire_message

T = EventType
FAMILIES: tuple[ModuleType, ...] = (deposits, withdrawals, reversals, adjustments)
# The lists the parts kept by hand before the declarations (schema/events.py,
# consumers/ledger/plan.py, notify/intents.py, ingest/payments.py at 0bafcf0's parent).
CREDITS = {T.DEPOSIT, T.AIRDROP, T.ADJUSTMENT_CREDIT}
HOLD_CLOSES = {T.WITHDRAWAL_SETTLED, T.WITHDRAWAL_FAILED, T.HOLD_EXPIRED}
REVERSALS = {T.REFUND, T.CHARGEBACK, T.REVERT}
GATEWAY = (T.DEPOSIT, T.AIRDROP, T.WITHDRAWAL, T.WITHDRAWAL_FEE, T.WITHDRAWAL_REQUESTED,
           T.WITHDRAWAL_SETTLED, T.WITHDRAWAL_FAILED, T.REFUND, T.CHARGEBACK)
FEE_TYPES = {T.WITHDRAWAL_REQUESTED, T.WITHDRAWAL_SETTLED}
REVERSIBLE = {
    T.REFUND: {T.DEPOSIT, T.AIRDROP}, T.CHARGEBACK: {T.DEPOSIT, T.AIRDROP},
    T.REVERT: {T.DEPOSIT, T.AIRDROP, T.WITHDRAWAL, T.WITHDRAWAL_FEE, T.ADJUSTMENT_CREDIT,
               T.ADJUSTMENT_DEBIT}}
WITHDRAWALS = {T.WITHDRAWAL, T.WITHDRAWAL_FEE, T.WITHDRAWAL_REQUESTED, T.WITHDRAWAL_SETTLED,
               T.WITHDRAWAL_FAILED, T.HOLD_EXPIRED}
OF_CHANGE = {
    (T.DEPOSIT, Outcome.APPLIED): "deposit.credited",
    (T.DEPOSIT, Outcome.PENDING_FINALITY): "deposit.pending",
    (T.AIRDROP, Outcome.APPLIED): "deposit.credited",
    (T.WITHDRAWAL, Outcome.APPLIED): "withdrawal.applied",
    (T.WITHDRAWAL_FEE, Outcome.APPLIED): "withdrawal.applied",
    (T.WITHDRAWAL_REQUESTED, Outcome.APPLIED): "withdrawal.requested",
    (T.WITHDRAWAL_SETTLED, Outcome.APPLIED): "withdrawal.settled",
    (T.WITHDRAWAL_FAILED, Outcome.APPLIED): "withdrawal.failed",
    (T.HOLD_EXPIRED, Outcome.APPLIED): "withdrawal.failed",
    **{(t, o): "balance.reversed" for t in REVERSALS
       for o in (Outcome.APPLIED, Outcome.SHORTFALL)},
    (T.ADJUSTMENT_CREDIT, Outcome.APPLIED): "balance.adjusted",
    (T.ADJUSTMENT_DEBIT, Outcome.APPLIED): "balance.adjusted",
    (T.ADJUSTMENT_DEBIT, Outcome.SHORTFALL): "balance.adjusted",
}


def test_every_event_type_is_declared_exactly_once_in_one_family() -> None:
    found = [value for family in FAMILIES for value in vars(family).values()
             if isinstance(value, EventType)]
    assert found == list(EventType)
    assert len({t.value for t in found}) == len(found) == len(EventType) == 13
    for t in EventType:
        assert EventType(t.value) is t and getattr(EventType, t.name) is t
        assert t.name == t.value.upper()


def test_the_declarations_derive_the_lists_the_parts_kept_by_hand() -> None:
    assert {t for t in EventType if t.is_credit} == CREDITS
    assert {t for t in EventType if t.closes_hold} == HOLD_CLOSES
    assert {t for t in EventType if t.is_reversal} == REVERSALS
    assert {t: t.reference_field for t in EventType if t.reference_field} == {
        **{t: "hold_id" for t in HOLD_CLOSES}, **{t: "reverses" for t in REVERSALS}}
    assert gateway_types() == GATEWAY
    assert {t for t in EventType if t.carries_fee} == FEE_TYPES
    assert {r: {t for t in EventType if r.may_reverse(t)} for r in REVERSALS} == REVERSIBLE
    assert {(t, o): name for t in EventType for o, name in t.intents.items()} == OF_CHANGE
    assert {t for t in EventType if t.rejected_intent == "withdrawal.rejected"} == WITHDRAWALS
    assert {t.hold_state for t in HOLD_CLOSES} == {HoldState.SETTLED, HoldState.FAILED,
                                                   HoldState.EXPIRED}
    # The plain path (a credit or a debit, applied, against its counter) and its counters.
    assert {t: t.plain for t in EventType if t.plain} == {
        T.DEPOSIT: (True, SETTLEMENT), T.AIRDROP: (True, SETTLEMENT),
        T.WITHDRAWAL: (False, SETTLEMENT), T.WITHDRAWAL_FEE: (False, FEES),
        T.ADJUSTMENT_CREDIT: (True, adjustments.ADJUSTMENTS)}


def test_every_declared_intent_is_one_notify_knows() -> None:
    names = {t.rejected_intent for t in EventType}
    names |= {name for t in EventType for name in t.intents.values()}
    assert names <= {i.value for i in IntentType}


def test_the_declared_names_are_what_the_shipped_check_allows() -> None:
    """A database the numbered migrations built needs no sync: the same set."""
    sql = dict(migration_files())["0009_holds_and_reversals"]
    check = sql[sql.index("ADD CONSTRAINT payment_events_event_type_check"):]
    listed = re.findall(r"'([a-z_]+)'", check[:check.index(";")])
    assert listed == [t.value for t in EventType]
    assert not {t.value for t in SettlementType} & set(listed)


def test_an_event_type_behaves_as_the_enum_did() -> None:
    assert T.DEPOSIT == "deposit" and f"{T.DEPOSIT}" == "deposit" and hash(T.DEPOSIT) == hash(
        "deposit")
    assert pickle.loads(pickle.dumps(T.REFUND)) is T.REFUND
    with pytest.raises(ValueError, match="not a declared event type"):
        EventType("deposit_finalized")
    with pytest.raises(AttributeError):
        T.DEPOSIT.gateway = False  # type: ignore[misc]


@pytest.mark.parametrize(("wire", "shape", "given", "says"), [
    ("deposit", Shape.CREDIT, {"counter": FEES}, "declared twice"),
    ("bonus", Shape.CREDIT, {}, "counter-account"),
    ("hold_more", Shape.HOLD, {"counter": FEES}, "counter-account"),
    ("closing", Shape.HOLD_RELEASE, {}, "state it leaves"),
    ("undo", Shape.REVERSAL, {}, "may reverse"),
    ("Bad-Name", Shape.CREDIT, {"counter": FEES}, "wire name"),
])
def test_a_declaration_that_contradicts_its_shape_is_refused(
        wire: str, shape: Shape, given: dict, says: str) -> None:
    with pytest.raises(AssertionError, match=says):
        declare(wire, shape, intents={}, **given)
    assert len(EventType) == 13


GATEWAY_BODY = {"event_id": "cb-1", "event_type": "cashback", "user_id": "u",
                "amount": "2.50"}


def test_a_type_declared_in_a_test_alone_is_accepted_planned_posted_and_notified() -> None:
    with pytest.raises(PayloadError, match="event_type must be one of"):
        parse_payment(GATEWAY_BODY, "USD")
    with cashback_declared() as cashback:
        # The ingest's parser accepts it (a gateway may send it), and names it.
        event = parse_payment(GATEWAY_BODY, "USD")
        assert event.event_type is cashback and "cashback" in str(
            _refusal({**GATEWAY_BODY, "event_type": "nope"}))
        # Read back from the wire as the ledger reads a record, planned as a credit.
        assert parse_wire(event.to_wire()).event_type is cashback
        candidate = read_event(record_of(wire_message(event)))
        plan = plan_batch([candidate], {})
        assert [o for _, o in plan.decisions] == [Outcome.APPLIED]
        assert plan.sorted_deltas() == [(("u", "USD"), Decimal("2.50"))]
        # Posted against the counter-account its declaration names: the platform's fees.
        assert plan.transfers[0][1] == [
            (AccountRef(AccountKind.AVAILABLE, "u", "USD"), Decimal("2.50")),
            (AccountRef(AccountKind.FEES, "platform", "USD"), Decimal("-2.50"))]
        assert postings(event, Outcome.APPLIED) == plan.transfers[0][1]
        # A gateway's refund may reverse it (a gateway's credit); notify tells the user.
        assert T.REFUND.may_reverse(cashback) and T.REVERT.may_reverse(cashback)
        intent = of_outcome(event, Outcome.APPLIED, "2026-01-01T00:00:00.000Z")
        assert intent is not None and intent.type is IntentType.DEPOSIT_CREDITED
        assert intent.data["event_type"] == "cashback"
    # Gone with its declaration.
    with pytest.raises(PayloadError):
        parse_payment(GATEWAY_BODY, "USD")
    assert "cashback" not in {t.value for t in EventType}


def _refusal(body: dict) -> PayloadError:
    with pytest.raises(PayloadError) as info:
        parse_payment(body, "USD")
    return info.value
