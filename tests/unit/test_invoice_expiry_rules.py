"""What the deadline leaves of an open invoice (invoices.expiry.at_deadline, pure):
expired, with paid_partial or paid_late as its payments say; left alone while a payment
made on time is still pending; the intents the change makes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from paystream.invoices import notices
from paystream.invoices.expiry import at_deadline
from paystream.invoices.model import Invoice
from paystream.invoices.rules import Additional, Payments, State
from paystream.notify.intents import IntentType

NOW = datetime(2026, 12, 5, 10, 0, tzinfo=UTC)


def _invoice(state: State = State.NEW, amount_paid: str = "0") -> Invoice:
    return Invoice("inv_" + "a" * 32, "u1", "USD", Decimal("100"), Decimal("2"), "order-1",
                   {}, None, None, NOW - timedelta(seconds=1), state, None,
                   Decimal(amount_paid), Decimal(0), NOW - timedelta(hours=1),
                   NOW - timedelta(hours=1))


def test_an_unpaid_invoice_expires_and_says_so() -> None:
    before = _invoice()
    after = at_deadline(before, Payments())
    assert after is not None and (after.state, after.additional) == (State.EXPIRED, None)
    [told] = notices.of_change(before, after, "2026-12-05T10:00:00.000Z")
    assert told.type is IntentType.INVOICE_EXPIRED
    assert told.data["invoice_id"] == before.invoice_id and told.data["amount_due"] == "100"


@pytest.mark.parametrize(("paid", "additional"), [
    (Payments(credited_on_time=Decimal("40")), Additional.PAID_PARTIAL),
    (Payments(credited_late=Decimal("100")), Additional.PAID_LATE),
    # Short of the tolerance (2 % of 100: 98 settles), by a hundredth.
    (Payments(credited_on_time=Decimal("97.99")), Additional.PAID_PARTIAL)])
def test_a_partly_paid_invoice_expires_with_what_it_was_paid(
        paid: Payments, additional: Additional) -> None:
    after = at_deadline(_invoice(amount_paid="40"), paid)
    assert after is not None and (after.state, after.additional) == (State.EXPIRED, additional)


def test_a_payment_made_on_time_still_pending_keeps_it_open() -> None:
    assert at_deadline(_invoice(State.PROCESSING),
                       Payments(pending_on_time=Decimal("100"))) is None


def test_paid_within_the_tolerance_it_settles_rather_than_expires() -> None:
    after = at_deadline(_invoice(), Payments(credited_on_time=Decimal("98")))
    assert after is not None and after.state is State.SETTLED


def test_the_expiry_of_a_processing_invoice_is_told_once() -> None:
    before = _invoice(State.PROCESSING)
    after = at_deadline(before, Payments())
    assert after is not None
    assert [i.type for i in notices.of_change(before, after, "t")] == [
        IntentType.INVOICE_EXPIRED]
    assert notices.of_change(after, replace(after), "t") == []
