"""The double-entry rule (consumers/ledger/postings.py): which accounts each event posts
to, every transfer summing to zero, and a batch plan's balance deltas being exactly its
transfers' user postings."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from paystream.consumers.ledger.plan import Candidate, plan_batch
from paystream.consumers.ledger.postings import UnbalancedTransferError, postings
from paystream.consumers.records import Origin, Record
from paystream.schema.accounts import AccountKind, AccountRef
from paystream.schema.events import EventType, PaymentEvent, SettlementType
from paystream.schema.processed_events import Outcome

X = Decimal("12.5")
LARGEST = Decimal("99999999999999999999.999999999999999999")  # NUMERIC(38,18)'s top
NET = "ETH_MAINNET"
CHAIN = {"network": NET, "deposit_event_id": "d1"}


def event(kind: EventType | SettlementType, amount: Decimal = X, *,
          chain: dict | None = None, provider: str = "gw") -> PaymentEvent:
    return PaymentEvent("e1", kind, "alice", "USDC", amount, provider, chain=chain)


def user(kind: AccountKind) -> AccountRef:
    return AccountRef(kind, "alice", "USDC")


def platform(kind: AccountKind, owner: str = "platform") -> AccountRef:
    return AccountRef(kind, owner, "USDC")


AVAILABLE, PENDING = user(AccountKind.AVAILABLE), user(AccountKind.PENDING)
CUSTODY = platform(AccountKind.CUSTODY, NET)
SETTLEMENT = platform(AccountKind.SETTLEMENT, "gw")


@pytest.mark.parametrize(("e", "outcome", "available", "expected"), [
    (event(EventType.DEPOSIT), Outcome.APPLIED, 0, [(AVAILABLE, X), (SETTLEMENT, -X)]),
    (event(EventType.AIRDROP), Outcome.APPLIED, 0, [(AVAILABLE, X), (SETTLEMENT, -X)]),
    (event(EventType.WITHDRAWAL), Outcome.APPLIED, 20, [(AVAILABLE, -X), (SETTLEMENT, X)]),
    (event(EventType.WITHDRAWAL_FEE), Outcome.APPLIED, 20,
     [(AVAILABLE, -X), (platform(AccountKind.FEES), X)]),
    (event(EventType.WITHDRAWAL), Outcome.INSUFFICIENT_FUNDS, 1, []),
    (event(EventType.WITHDRAWAL), Outcome.ACCOUNT_FLAGGED, 20, []),
    (event(EventType.DEPOSIT, chain={"network": NET}), Outcome.PENDING_FINALITY, 0,
     [(PENDING, X), (CUSTODY, -X)]),
    (event(SettlementType.DEPOSIT_FINALIZED, chain=CHAIN), Outcome.APPLIED, 0,
     [(PENDING, -X), (AVAILABLE, X)]),
    (event(SettlementType.DEPOSIT_CREDITED, chain=CHAIN), Outcome.CREDITED, 0,
     [(PENDING, -X), (AVAILABLE, X)]),
    (event(SettlementType.DEPOSIT_FINALIZED, chain={**CHAIN, "credited": True}),
     Outcome.APPLIED, 0, []),
    (event(SettlementType.DEPOSIT_REORGED, chain=CHAIN), Outcome.REORGED, 0,
     [(PENDING, -X), (CUSTODY, X)]),
    (event(SettlementType.DEPOSIT_REVERSED, chain=CHAIN), Outcome.APPLIED, 20,
     [(AVAILABLE, -X), (CUSTODY, X)]),
    (event(SettlementType.DEPOSIT_REVERSED, chain=CHAIN), Outcome.SHORTFALL, Decimal("2.5"),
     [(AVAILABLE, Decimal("-2.5")), (platform(AccountKind.RECEIVABLE), Decimal(-10)),
      (CUSTODY, X)]),
    (event(SettlementType.DEPOSIT_REVERSED, chain=CHAIN), Outcome.SHORTFALL, 0,
     [(platform(AccountKind.RECEIVABLE), -X), (CUSTODY, X)]),
])
def test_each_event_posts_to_its_accounts_and_sums_to_zero(e, outcome, available,
                                                           expected) -> None:
    moved = postings(e, outcome, Decimal(available), NET)
    assert moved == expected
    assert sum((amount for _, amount in moved), Decimal(0)) == 0
    assert len({ref for ref, _ in moved}) == len(moved)  # an account once per transfer


def test_amounts_at_the_column_limit_stay_exact() -> None:
    # The default context (28 digits) would round the negation of 38 digits.
    moved = postings(event(EventType.DEPOSIT, LARGEST), Outcome.APPLIED)
    assert moved == [(AVAILABLE, LARGEST), (SETTLEMENT, LARGEST.copy_negate())]


def test_a_chain_posting_without_its_network_is_refused_before_anything_is_written() -> None:
    with pytest.raises(AssertionError, match="network"):
        postings(event(SettlementType.DEPOSIT_REORGED, chain=CHAIN), Outcome.REORGED)


def test_the_unbalanced_error_is_an_assertion() -> None:
    # A bug in the rule table stops the batch (never written); it is not a poison message.
    assert issubclass(UnbalancedTransferError, AssertionError)


def _candidate(e: PaymentEvent, offset: int) -> Candidate:
    record = Record(Origin("t", 0, offset), e.user_id.encode(), b"{}", (), None)
    return Candidate(record, e, f"{offset:064x}", None)


def test_a_plans_balance_deltas_are_its_transfers_user_postings() -> None:
    rng = random.Random(7)
    users, kinds = ["a", "b", "c"], [EventType.DEPOSIT, EventType.AIRDROP,
                                      EventType.WITHDRAWAL, EventType.WITHDRAWAL_FEE]
    batch = [_candidate(PaymentEvent(f"e{i}", rng.choice(kinds), rng.choice(users), "USDC",
                                     Decimal(rng.randint(1, 10_000)) / 100, "gw"), i)
             for i in range(500)]
    plan = plan_batch(batch, {("a", "USDC"): Decimal(40)})
    moved_by_kind: dict[tuple[str, AccountKind], Decimal] = {}
    for _, moved in plan.transfers:
        assert sum((amount for _, amount in moved), Decimal(0)) == 0
        for ref, amount in moved:
            if ref.kind.is_user:
                key = (ref.owner, ref.kind)
                moved_by_kind[key] = moved_by_kind.get(key, Decimal(0)) + amount
    for u in users:
        assert plan.deltas.get((u, "USDC"), Decimal(0)) == \
            moved_by_kind.get((u, AccountKind.AVAILABLE), Decimal(0))
    # Every applied event is one transfer; a rejection none.
    applied = sum(1 for _, o in plan.decisions if o is Outcome.APPLIED)
    assert len(plan.transfers) == applied
    assert applied < len(batch)  # some debits were refused, so the check is not vacuous


@pytest.mark.parametrize(("kind", "then_available", "now_available"), [
    (EventType.ADJUSTMENT_CREDIT, X, X.copy_negate()),
    (EventType.ADJUSTMENT_DEBIT, X.copy_negate(), X),
])
def test_a_revert_of_an_adjustment_posts_against_the_adjustments_account(
        kind: EventType, then_available: Decimal, now_available: Decimal) -> None:
    """The original's counter-account is the one its declaration names (adjustments),
    not the operator's settlement (what the rule said before the declarations)."""
    original = event(kind, provider="operator")
    adjustments = platform(AccountKind.ADJUSTMENTS)
    assert postings(original, Outcome.APPLIED, available=X) == [
        (AVAILABLE, then_available), (adjustments, then_available.copy_negate())]
    revert = PaymentEvent("r1", EventType.REVERT, "alice", "USDC", X, "operator",
                          reference="e1")
    assert postings(revert, Outcome.APPLIED, available=X, original=original) == [
        (AVAILABLE, now_available), (adjustments, now_available.copy_negate())]
