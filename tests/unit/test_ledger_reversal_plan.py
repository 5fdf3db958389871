"""Credit before finality and its compensating debit
(docs/finality.md#credit-before-finality), as pure rules: the ledger's plan (credited,
finalised without money, reversed: covered, partially covered, shortfall, flagged), the
settlement consistency checks, the watcher's verdicts at the credit height and the events
they become."""

from __future__ import annotations

from decimal import Decimal

import pytest

from paystream.consumers.ledger.plan import Outcome, effects, plan_batch, read_event, reversal_split
from paystream.consumers.ledger.settlements import settlement_conflict
from paystream.finality import events
from paystream.finality.evidence import BlockRef, Receipt, Transaction
from paystream.finality.store import settlement_wire
from paystream.finality.verify import ChainOutcome as V
from paystream.finality.verify import FinalityVerdict, judge, reorged
from paystream.schema.accounts import AccountKind, AccountRef
from paystream.schema.chain import ExpectedDeposit
from tests.unit.test_ledger_finality_plan import (
    ASSET,
    AVAILABLE,
    CHAIN,
    CUSTODY,
    DEPOSIT_ID,
    NETWORKS,
    plain,
    rec,
)

PAIR = ("u", ASSET)
RECEIVABLE = AccountRef(AccountKind.RECEIVABLE, "platform", ASSET)
DEPOSIT = ExpectedDeposit.from_chain(DEPOSIT_ID, CHAIN)  # 1.5 native, block 100
CONFIRMED = FinalityVerdict(V.CONFIRMED, block=BlockRef(100, "0x" + "cd" * 32))
FINAL = FinalityVerdict(V.FINAL, block=BlockRef(100, "0x" + "cd" * 32))


def settlement(verdict: FinalityVerdict, credited: bool = False, amount: str = "1.5"):
    return read_event(rec(settlement_wire(DEPOSIT, verdict, "u", ASSET, Decimal(amount),
                                          credited)))


def credit():
    return settlement(CONFIRMED)


def reversal(reason: str = "tx_not_in_chain"):
    return settlement(reorged(reason), credited=True)


def test_reversal_split_takes_what_is_there_and_owes_the_rest() -> None:
    assert reversal_split(Decimal("1.5"), Decimal(10)) == (Decimal("1.5"), Decimal(0))
    assert reversal_split(Decimal("1.5"), Decimal("1.5")) == (Decimal("1.5"), Decimal(0))
    assert reversal_split(Decimal("1.5"), Decimal("0.4")) == (Decimal("0.4"), Decimal("1.1"))
    assert reversal_split(Decimal("1.5"), Decimal(0)) == (Decimal(0), Decimal("1.5"))


def test_credit_before_finality_moves_pending_to_available_and_funds_a_withdrawal() -> None:
    plan = plan_batch([credit(), read_event(plain("withdrawal", "1", "w-c1"))], {})
    assert [o for _, o in plan.decisions] == [Outcome.CREDITED, Outcome.APPLIED]
    assert plan.sorted_deltas() == [(PAIR, Decimal("0.5"))]
    assert plan.sorted_pending_deltas() == [(PAIR, Decimal("-1.5"))]


def test_finalisation_of_a_credited_deposit_moves_no_money() -> None:
    fin = settlement(FINAL, credited=True)
    assert fin.event.event_id == DEPOSIT_ID + ":finalized" and fin.event.settles_credited
    plan = plan_batch([fin], {PAIR: Decimal(3)})
    assert plan.decisions[0][1] is Outcome.APPLIED
    assert plan.sorted_deltas() == [] and plan.sorted_pending_deltas() == []
    assert plan.transfers == []  # no transfer: nothing moves
    # The plain finalisation (never credited) still moves pending to available.
    assert effects(settlement(FINAL).event, Outcome.APPLIED) == (Decimal("1.5"),
                                                                  Decimal("-1.5"))


def test_reversal_covered_debits_the_amount() -> None:
    c = reversal()
    assert c.event.event_id == DEPOSIT_ID + ":reversed"
    plan = plan_batch([c], {PAIR: Decimal(4)}, networks=NETWORKS)
    assert plan.decisions[0][1] is Outcome.APPLIED
    assert plan.sorted_deltas() == [(PAIR, Decimal("-1.5"))]
    # The chain took it back from custody; the user paid it all.
    assert plan.transfers[0][1] == [(AVAILABLE, Decimal("-1.5")), (CUSTODY, Decimal("1.5"))]
    assert plan.shortfalls == [] and plan.closing[PAIR] == Decimal("2.5")


def test_reversal_partially_covered_takes_what_is_there_and_records_the_rest() -> None:
    plan = plan_batch([reversal()], {PAIR: Decimal("0.5")}, networks=NETWORKS)
    assert plan.decisions[0][1] is Outcome.SHORTFALL
    assert plan.sorted_deltas() == [(PAIR, Decimal("-0.5"))]  # never below zero
    # What moved, and what is owed: the receivable carries the rest.
    assert plan.transfers[0][1] == [(AVAILABLE, Decimal("-0.5")),
                                    (RECEIVABLE, Decimal("-1.0")), (CUSTODY, Decimal("1.5"))]
    assert [(c.event.event_id, owed) for c, owed in plan.shortfalls] == \
        [(DEPOSIT_ID + ":reversed", Decimal("1.0"))]
    assert plan.closing[PAIR] == 0


def test_reversal_with_nothing_left_moves_nothing_and_owes_everything() -> None:
    plan = plan_batch([reversal()], {}, networks=NETWORKS)
    assert plan.decisions[0][1] is Outcome.SHORTFALL
    assert plan.sorted_deltas() == []
    # No zero posting to the user: the receivable owes it all.
    assert plan.transfers[0][1] == [(RECEIVABLE, Decimal("-1.5")), (CUSTODY, Decimal("1.5"))]
    assert [owed for _, owed in plan.shortfalls] == [Decimal("1.5")]


def test_a_shortfall_flags_the_user_for_the_rest_of_the_batch_in_every_asset() -> None:
    other = rec({"event_id": "w-other", "event_type": "withdrawal", "user_id": "u",
                 "asset": "USD", "amount": "1", "provider": "payments"})
    batch = [read_event(plain("deposit", "10", "d-f1")), reversal(),
             read_event(plain("withdrawal", "1", "w-f1")), read_event(other),
             read_event(plain("deposit", "5", "d-f2"))]
    # Before the reversal: 10 available, so the reversal is covered: no flag.
    plan = plan_batch(batch, {("u", "USD"): Decimal(9)}, networks=NETWORKS)
    assert [o for _, o in plan.decisions][1:4] == [Outcome.APPLIED] * 3
    # Nothing available: shortfall, then both debits refused, credits still land.
    plan = plan_batch(batch[1:], {("u", "USD"): Decimal(9)}, networks=NETWORKS)
    assert [o for _, o in plan.decisions] == [Outcome.SHORTFALL, Outcome.ACCOUNT_FLAGGED,
                                              Outcome.ACCOUNT_FLAGGED, Outcome.APPLIED]
    assert plan.sorted_deltas() == [(PAIR, Decimal(5))]


def test_a_user_flagged_before_the_batch_cannot_withdraw_even_when_funded() -> None:
    batch = [read_event(plain("deposit", "10", "d-g1")),
             read_event(plain("withdrawal", "1", "w-g1")),
             read_event(plain("withdrawal_fee", "0.1", "f-g1"))]
    plan = plan_batch(batch, {}, flagged={"u"})
    assert [o for _, o in plan.decisions] == [Outcome.APPLIED, Outcome.ACCOUNT_FLAGGED,
                                              Outcome.ACCOUNT_FLAGGED]
    assert plan.sorted_deltas() == [(PAIR, Decimal(10))]
    assert plan_batch(batch, {}, flagged={"someone-else"}).decisions[1][1] is Outcome.APPLIED


@pytest.mark.parametrize(("kind", "state", "credited", "problem"), [
    # A reversal needs a credited deposit; never-credited is a dead letter.
    ("reversed", "pending", False, "deposit_not_credited"),
    ("reversed", "reorged", False, "deposit_not_credited"),
    ("reversed", "final", True, "deposit_already_settled"),
    ("reversed", "reversing", True, None), ("reversed", "reversed", True, None),
    # A credit only from crediting (or its replay once credited).
    ("credited", "crediting", False, None), ("credited", "credited", True, None),
    ("credited", "final", True, None),
    ("credited", "final", False, "deposit_already_settled"),
    ("credited", "pending", False, "deposit_not_crediting"),
    # Never credit twice, never forget a credit.
    ("finalized_plain", "credited", True, "deposit_credit_mismatch"),
    ("finalized_plain", "finalizing", False, None),
    ("finalized_credited", "finalizing", True, None),
    ("finalized_credited", "finalizing", False, "deposit_credit_mismatch"),
    ("finalized_credited", "reversed", True, "deposit_already_settled"),
    # Credited money is only taken back by a reversal.
    ("reorged", "reorging", True, "deposit_already_credited"),
    ("reorged", "reorging", False, None),
])
def test_settlement_conflicts(kind: str, state: str, credited: bool,
                              problem: str | None) -> None:
    event = {"reversed": reversal, "credited": credit,
             "finalized_plain": lambda: settlement(FINAL),
             "finalized_credited": lambda: settlement(FINAL, credited=True),
             "reorged": lambda: settlement(reorged("x"))}[kind]().event
    assert settlement_conflict(event, state, credited) == problem


def receipt(block: int, status: int = 1) -> Receipt:
    return Receipt(tx_hash=DEPOSIT.tx_hash, block_number=block, block_hash="0x" + "cd" * 32,
                   status=status, sender="0x" + "22" * 20, to=DEPOSIT.recipient, logs=())


def tx() -> Transaction:
    return Transaction(tx_hash=DEPOSIT.tx_hash, block_number=100,
                       block_hash="0x" + "cd" * 32, sender="0x" + "22" * 20,
                       to=DEPOSIT.recipient, value=DEPOSIT.raw_value)


def test_judge_at_the_credit_height() -> None:
    r, t = receipt(100), tx()
    # Finality wins when it has spoken.
    assert judge(DEPOSIT, finalized=100, confirmed=105, receipt=r, transaction=t).outcome \
        is V.FINAL
    # Between finality and the credit height: deep enough to credit.
    v = judge(DEPOSIT, finalized=90, confirmed=100, receipt=r, transaction=t)
    assert v.outcome is V.CONFIRMED and v.block.number == 100
    # Above the credit height: not yet; without a credit depth: today's verdicts.
    assert judge(DEPOSIT, finalized=90, confirmed=99, receipt=r, transaction=t).outcome \
        is V.NOT_YET
    assert judge(DEPOSIT, finalized=90, confirmed=None, receipt=r, transaction=t).outcome \
        is V.NOT_YET
    # Gone / reverted at the credit height, finality silent: UNCONFIRMED, with why.
    gone = judge(DEPOSIT, finalized=90, confirmed=100, receipt=None)
    assert (gone.outcome, gone.reason) == (V.UNCONFIRMED, "tx_not_in_chain")
    bad = judge(DEPOSIT, finalized=90, confirmed=100, receipt=receipt(100, 0),
                transaction=t)
    assert (bad.outcome, bad.reason) == (V.UNCONFIRMED, "tx_reverted")
    # Gone below finality: REORGED, as today.
    assert judge(DEPOSIT, finalized=100, confirmed=110, receipt=None).outcome is V.REORGED


def test_events_per_state_and_verdict() -> None:
    assert events.event_id(DEPOSIT, CONFIRMED) == DEPOSIT_ID + ":credited"
    assert events.event_type(CONFIRMED) == "deposit_credited"
    assert events.event_id(DEPOSIT, FINAL, credited=True) == DEPOSIT_ID + ":finalized"
    assert events.payload(DEPOSIT, FINAL, credited=True)["credited"] is True
    assert "credited" not in events.payload(DEPOSIT, FINAL)
    for taken_back in (reorged("tx_not_in_chain"), FinalityVerdict(V.UNCONFIRMED, "log_missing")):
        assert events.event_id(DEPOSIT, taken_back, credited=True) == \
            DEPOSIT_ID + ":reversed"
        assert events.event_type(taken_back, credited=True) == "deposit_reversed"
    assert events.event_id(DEPOSIT, reorged("x")) == DEPOSIT_ID + ":reorged"
    with pytest.raises(ValueError):
        events.event_type(FinalityVerdict(V.UNCONFIRMED, "x"))  # a pending deposit waits
    with pytest.raises(ValueError):
        events.event_type(CONFIRMED, credited=True)  # credited already: nothing to do
