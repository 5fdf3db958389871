"""`reconcile`'s invoice check, in memory: which disagreement between an invoice and its
payments is which problem, and how the operator sees it."""

from __future__ import annotations

from decimal import Decimal

from paystream.consumers.ledger.reconcile import Report
from paystream.consumers.ledger.reconcile_report import format_report
from paystream.invoices.reconcile_check import InvoiceMismatch
from paystream.reconcile_checks import invoice_findings

D = Decimal


def mismatch(state: str = "settled", paid: str = "100", credited: str = "100",
             on_time: str = "100", pending_row: str = "0", pending: str = "0",
             least: str = "90") -> InvoiceMismatch:
    return InvoiceMismatch("inv_" + "a" * 32, "u1", state, D(100), D(paid), D(credited),
                           D(on_time), D(pending_row), D(pending), D(least))


def test_each_disagreement_is_named() -> None:
    assert mismatch().problems == []
    assert mismatch(paid="101").problems == ["amount_paid_differs"]
    assert mismatch(pending_row="5").problems == ["amount_pending_differs"]
    assert mismatch(on_time="89.99", credited="89.99", paid="89.99").problems == [
        "settled_unpaid"]
    # Late money does not settle: credited in full, but on time short.
    assert mismatch(on_time="50").problems == ["settled_unpaid"]
    assert mismatch(state="expired", on_time="0", credited="0", paid="0").problems == []


def test_an_invoice_mismatch_fails_the_report_and_is_shown() -> None:
    clean = Report(2, [], "t", transfers_checked=3, features=[invoice_findings(4, [])])
    assert clean.clean
    assert "4 invoices match their payments" in format_report(clean)
    bad = Report(2, [], "t", transfers_checked=3,
                 features=[invoice_findings(4, [mismatch(paid="150", on_time="80",
                                                         credited="80")])])
    assert not bad.clean
    lines = format_report(bad).splitlines()
    assert lines[0] == ("reconcile: 1 MISMATCH(ES) among 2 balances, 3 transfers and 4"
                        " invoices (snapshot at t)")
    assert lines[2].split() == ["inv_" + "a" * 32, "u1", "settled", "100", "150", "80", "0",
                                "0", "amount_paid_differs,", "settled_unpaid"]
