"""Holds, refunds, chargebacks and adjustments through the real ledger
(docs/ledger.md#holds-two-phase-withdrawals and the section after it): which account each
moves, the outcomes that refuse, the hold states the table enforces, and reconcile clean
afterwards. Expected figures are worked out by hand here, from the events sent, not from
the ledger's own rule table."""

from __future__ import annotations

from decimal import Decimal
from itertools import count

import psycopg2
import pytest

from paystream.consumers.ledger.reconcile import reconcile
from paystream.schema.db import Connection
from paystream.schema.events import EventType, PaymentEvent
from tests.support.consumers import record_of, store_events, wire_message
from tests.support.ids import unique
from tests.support.ledger import ledger_apply

_offsets = count()


class Books:
    """One user's events through the ledger, and what their accounts say."""

    def __init__(self, db: Connection, ledger: Connection) -> None:
        self.db, self.ledger = db, ledger
        self.user = unique("hold-u")
        with db.cursor() as cur:
            cur.execute("INSERT INTO users (user_id) VALUES (%s)", (self.user,))

    def event(self, kind: EventType, amount: str, *, reference: str | None = None,
              fee: str | None = None, user: str | None = None,
              provider: str = "payments") -> PaymentEvent:
        return PaymentEvent(unique(f"hold-{kind.value}"), kind, user or self.user, "USD",
                            Decimal(amount), provider, reference=reference,
                            fee=None if fee is None else Decimal(fee))

    def apply(self, *events: PaymentEvent) -> list[str]:
        """The outcomes of `events`, applied as one batch, in order."""
        with self.db.cursor() as cur:
            store_events(cur, events)
        result = ledger_apply(self.ledger, [record_of(wire_message(e), offset=next(_offsets))
                                            for e in events])
        assert not result.dead_letters, result.dead_letters
        with self.db.cursor() as cur:
            cur.execute("SELECT event_id, outcome FROM processed_events"
                        " WHERE event_id = ANY(%s)", ([e.event_id for e in events],))
            outcomes = dict(cur.fetchall())
        return [outcomes[e.event_id] for e in events]

    def balance(self) -> tuple[Decimal, Decimal]:
        """(available, held)."""
        with self.db.cursor() as cur:
            cur.execute("SELECT balance, held FROM balances WHERE user_id = %s AND asset = 'USD'",
                        (self.user,))
            return cur.fetchone()

    def postings(self, event: PaymentEvent) -> list[tuple[str, str, Decimal]]:
        with self.db.cursor() as cur:
            cur.execute("SELECT a.kind, a.owner, p.amount FROM postings p"
                        " JOIN transfers t USING (transfer_id) JOIN accounts a USING (account_id)"
                        " WHERE t.source_event_id = %s ORDER BY 1, 2", (event.event_id,))
            return cur.fetchall()

    def hold_state(self, hold: PaymentEvent) -> str:
        with self.db.cursor() as cur:
            cur.execute("SELECT state FROM holds WHERE hold_id = %s", (hold.event_id,))
            return cur.fetchone()[0]

    def status(self, event: PaymentEvent) -> str:
        with self.db.cursor() as cur:
            cur.execute("SELECT status FROM event_status WHERE event_id = %s",
                        (event.event_id,))
            return cur.fetchone()[0]


@pytest.fixture
def books(db: Connection, ledger_db) -> Books:
    return Books(db, ledger_db.connection())


def _clean(db: Connection, *users: str) -> None:
    report = reconcile(db, users=list(users))
    assert report.clean, (report.mismatches, report.transfer_problems)


def test_a_hold_is_placed_settled_once_and_cannot_be_closed_again(books: Books, db) -> None:
    deposit = books.event(EventType.DEPOSIT, "100")
    request = books.event(EventType.WITHDRAWAL_REQUESTED, "30", fee="1")
    assert books.apply(deposit, request) == ["applied", "applied"]
    assert books.balance() == (Decimal(69), Decimal(31))  # amount + fee held
    assert books.postings(request) == [("available", books.user, Decimal(-31)),
                                       ("held", books.user, Decimal(31))]
    assert books.hold_state(request) == "held"

    settle = books.event(EventType.WITHDRAWAL_SETTLED, "30", reference=request.event_id)
    assert books.apply(settle) == ["applied"]
    assert books.balance() == (Decimal(69), Decimal(0))
    # The held fee is charged; the gateway pays the amount out.
    assert books.postings(settle) == [("fees", "platform", Decimal(1)),
                                      ("held", books.user, Decimal(-31)),
                                      ("settlement", "payments", Decimal(30))]
    assert books.hold_state(request) == "settled"

    # Closed is closed: a second settle and a failure are refused and move nothing.
    again = books.event(EventType.WITHDRAWAL_SETTLED, "30", reference=request.event_id)
    failed = books.event(EventType.WITHDRAWAL_FAILED, "30", reference=request.event_id)
    assert books.apply(again, failed) == ["hold_not_open", "hold_not_open"]
    assert books.balance() == (Decimal(69), Decimal(0))
    assert books.postings(again) == [] and books.status(again) == "rejected"
    # The table refuses the transition too, whoever writes.
    with db.cursor() as cur, pytest.raises(psycopg2.errors.CheckViolation):
        cur.execute("UPDATE holds SET state = 'failed' WHERE hold_id = %s",
                    (request.event_id,))
    _clean(db, books.user)


def test_a_settlement_posts_at_most_the_hold_and_releases_the_rest(books: Books, db) -> None:
    request = books.event(EventType.WITHDRAWAL_REQUESTED, "50", fee="2")
    books.apply(books.event(EventType.DEPOSIT, "100"), request)
    assert books.balance() == (Decimal(48), Decimal(52))
    too_much = books.event(EventType.WITHDRAWAL_SETTLED, "50.01", reference=request.event_id)
    fee_too_high = books.event(EventType.WITHDRAWAL_SETTLED, "40", fee="3",
                               reference=request.event_id)
    partial = books.event(EventType.WITHDRAWAL_SETTLED, "40", fee="0",
                          reference=request.event_id)
    assert books.apply(too_much, fee_too_high, partial) == ["exceeds_hold", "exceeds_hold",
                                                            "applied"]
    # 40 paid out, no fee charged: 12 back to available.
    assert books.balance() == (Decimal(60), Decimal(0))
    assert books.postings(partial) == [("available", books.user, Decimal(12)),
                                       ("held", books.user, Decimal(-52)),
                                       ("settlement", "payments", Decimal(40))]
    _clean(db, books.user)


def test_a_failed_withdrawal_voids_its_hold_and_refusals_say_why(books: Books, db) -> None:
    request = books.event(EventType.WITHDRAWAL_REQUESTED, "20")
    broke = books.event(EventType.WITHDRAWAL_REQUESTED, "81")
    assert books.apply(books.event(EventType.DEPOSIT, "100"), request, broke) == \
        ["applied", "applied", "insufficient_funds"]
    failed = books.event(EventType.WITHDRAWAL_FAILED, "20", reference=request.event_id)
    unknown = books.event(EventType.WITHDRAWAL_SETTLED, "1", reference=unique("no-hold"))
    assert books.apply(failed, unknown) == ["applied", "hold_not_open"]
    assert books.balance() == (Decimal(100), Decimal(0))
    assert books.hold_state(request) == "failed"
    assert books.postings(failed) == [("available", books.user, Decimal(20)),
                                      ("held", books.user, Decimal(-20))]
    _clean(db, books.user)


def test_another_users_hold_cannot_be_closed(books: Books, db, ledger_db) -> None:
    request = books.event(EventType.WITHDRAWAL_REQUESTED, "5")
    books.apply(books.event(EventType.DEPOSIT, "10"), request)
    other = Books(db, ledger_db.connection())
    steal = other.event(EventType.WITHDRAWAL_FAILED, "5", reference=request.event_id)
    assert other.apply(steal) == ["hold_not_open"]
    assert books.hold_state(request) == "held" and books.balance() == (Decimal(5), Decimal(5))


def test_refunds_and_chargebacks_never_take_back_more_than_the_original(books: Books,
                                                                         db) -> None:
    deposit = books.event(EventType.DEPOSIT, "100")
    refund = books.event(EventType.REFUND, "40", reference=deposit.event_id)
    too_much = books.event(EventType.CHARGEBACK, "60.01", reference=deposit.event_id)
    chargeback = books.event(EventType.CHARGEBACK, "60", reference=deposit.event_id)
    more = books.event(EventType.REFUND, "0.01", reference=deposit.event_id)
    # The original applied earlier in the same batch counts.
    assert books.apply(deposit, refund, too_much, chargeback, more) == [
        "applied", "applied", "exceeds_original", "applied", "exceeds_original"]
    assert books.balance() == (Decimal(0), Decimal(0))
    assert books.postings(refund) == [("available", books.user, Decimal(-40)),
                                      ("settlement", "payments", Decimal(40))]
    withdrawal = books.event(EventType.WITHDRAWAL, "1")
    not_a_credit = books.event(EventType.REFUND, "1", reference=withdrawal.event_id)
    nothing = books.event(EventType.REFUND, "1", reference=unique("nothing"))
    assert books.apply(books.event(EventType.DEPOSIT, "5"), withdrawal, not_a_credit,
                       nothing)[2:] == ["invalid_reversal", "invalid_reversal"]
    _clean(db, books.user)


def test_a_refund_available_cannot_cover_opens_a_shortfall_and_flags_the_user(
        books: Books, db) -> None:
    deposit = books.event(EventType.DEPOSIT, "100")
    books.apply(deposit, books.event(EventType.WITHDRAWAL, "90"))
    refund = books.event(EventType.REFUND, "100", reference=deposit.event_id)
    later = books.event(EventType.WITHDRAWAL_REQUESTED, "1")
    assert books.apply(refund, books.event(EventType.DEPOSIT, "5"), later) == [
        "shortfall", "applied", "account_flagged"]
    assert books.balance() == (Decimal(5), Decimal(0))
    # 10 taken, 90 owed: the platform's receivable; the gateway gets its 100 back.
    assert books.postings(refund) == [("available", books.user, Decimal(-10)),
                                      ("receivable", "platform", Decimal(-90)),
                                      ("settlement", "payments", Decimal(100))]
    with db.cursor() as cur:
        cur.execute("SELECT amount, deposit_event_id FROM account_shortfalls"
                    " WHERE source_event_id = %s", (refund.event_id,))
        assert cur.fetchall() == [(Decimal(90), deposit.event_id)]
    assert books.status(refund) == "applied"
    _clean(db, books.user)


def test_adjustments_move_money_against_the_adjustments_account(books: Books, db) -> None:
    credit = books.event(EventType.ADJUSTMENT_CREDIT, "7", provider="operator")
    debit = books.event(EventType.ADJUSTMENT_DEBIT, "9", provider="operator")
    assert books.apply(credit, debit) == ["applied", "shortfall"]
    assert books.balance() == (Decimal(0), Decimal(0))
    assert books.postings(debit) == [("adjustments", "platform", Decimal(9)),
                                     ("available", books.user, Decimal(-7)),
                                     ("receivable", "platform", Decimal(-2))]
    revert = books.event(EventType.REVERT, "7", reference=credit.event_id, provider="operator")
    # A gateway may not reverse the operator's adjustment; the operator may.
    gateway = books.event(EventType.REFUND, "7", reference=credit.event_id)
    assert books.apply(gateway, revert) == ["invalid_reversal", "shortfall"]
    _clean(db, books.user)
