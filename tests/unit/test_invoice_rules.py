"""The invoice state rule (invoices/rules.py): its table, row by row, with the tolerance
edges, over- and underpayment, late money, a cancel, and a settled invoice's money
reversed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal, localcontext

import pytest

from paystream.invoices.rules import (
    Additional,
    Payments,
    State,
    amount_due,
    bounds,
    is_late,
    standing,
)

D = Decimal
NEW, PROCESSING, SETTLED, EXPIRED, INVALID = (State.NEW, State.PROCESSING, State.SETTLED,
                                              State.EXPIRED, State.INVALID)
PARTIAL, OVER, LATE = Additional.PAID_PARTIAL, Additional.PAID_OVER, Additional.PAID_LATE


# (amount, tolerance %, credited on time, pending on time, credited late, deadline passed,
#  expected state, expected additional)
TABLE = [
    # nothing paid
    ("100", "0", "0", "0", "0", False, NEW, None),
    ("100", "0", "0", "0", "0", True, EXPIRED, None),
    # exactly paid, in one or two payments (sums are what the rule sees)
    ("100", "0", "100", "0", "0", False, SETTLED, None),
    ("100", "0", "100", "0", "0", True, SETTLED, None),
    # 90 % with a 10 % tolerance settles; a hair under does not
    ("100", "10", "90", "0", "0", False, SETTLED, None),
    ("100", "10", "89.999999999999999999", "0", "0", False, NEW, PARTIAL),
    ("100", "10", "89.999999999999999999", "0", "0", True, EXPIRED, PARTIAL),
    # 90 % without tolerance: partial, then expired and still partial
    ("100", "0", "90", "0", "0", False, NEW, PARTIAL),
    ("100", "0", "90", "0", "0", True, EXPIRED, PARTIAL),
    # overpaid: past the tolerance it says so, within it it does not
    ("100", "0", "110", "0", "0", False, SETTLED, OVER),
    ("100", "10", "110", "0", "0", False, SETTLED, None),
    ("100", "10", "110.000000000000000001", "0", "0", False, SETTLED, OVER),
    ("100", "0", "100.000000000000000001", "0", "0", False, SETTLED, OVER),
    # seen, not final: processing, partial while the seen sum falls short
    ("100", "0", "0", "100", "0", False, PROCESSING, None),
    ("100", "0", "0", "100", "0", True, PROCESSING, None),  # paid on time: expiry waits
    ("100", "0", "0", "50", "0", False, PROCESSING, PARTIAL),
    ("100", "0", "50", "50", "0", False, PROCESSING, None),
    ("100", "10", "0", "90", "0", False, PROCESSING, None),
    # late money: credited to the user, marks the invoice, never settles it
    ("100", "0", "0", "0", "100", True, EXPIRED, LATE),
    ("100", "0", "90", "0", "10", True, EXPIRED, LATE),
    ("100", "0", "0", "0", "100", False, NEW, None),  # (late only once cancelled)
    # late money on top of a settled invoice counts toward paid_over
    ("100", "0", "100", "0", "5", True, SETTLED, OVER),
    ("100", "10", "100", "0", "5", True, SETTLED, None),
]


@pytest.mark.parametrize(("amount", "tol", "on_time", "pending", "late", "passed", "state",
                          "additional"), TABLE)
def test_standing_table(amount: str, tol: str, on_time: str, pending: str, late: str,
                        passed: bool, state: State, additional: Additional | None) -> None:
    got = standing(D(amount), D(tol), Payments(D(on_time), D(pending), D(late)),
                   deadline_passed=passed, cancelled=False)
    assert (got.state, got.additional) == (state, additional)


def test_a_cancelled_invoice_stays_invalid_and_says_when_paid_after() -> None:
    def cancelled(paid: Payments) -> tuple[State, Additional | None]:
        got = standing(D(100), D(0), paid, deadline_passed=False, cancelled=True)
        return got.state, got.additional

    assert cancelled(Payments()) == (INVALID, None)
    assert cancelled(Payments(credited_late=D(100))) == (INVALID, LATE)
    assert cancelled(Payments(pending_on_time=D(100))) == (INVALID, None)


@pytest.mark.parametrize(("on_time", "late", "expected"), [
    ("0", "0", (INVALID, None)),        # all its money reversed
    ("50", "0", (INVALID, PARTIAL)),    # part of it reversed, below the tolerance
    ("0", "30", (INVALID, LATE)),       # only late money left
    ("95", "0", (SETTLED, None)),       # still within the 10 % tolerance: stays settled
    ("150", "0", (SETTLED, OVER)),      # an overpayment's surplus reversed: still over
])
def test_a_settled_invoice_whose_money_is_reversed(on_time: str, late: str,
                                                   expected: tuple[State, Additional | None]
                                                   ) -> None:
    got = standing(D(100), D(10), Payments(D(on_time), credited_late=D(late)),
                   deadline_passed=False, cancelled=False, was_settled=True)
    assert (got.state, got.additional) == expected


def test_a_reversal_before_settlement_only_moves_it_back() -> None:
    got = standing(D(100), D(0), Payments(D(0)), deadline_passed=False, cancelled=False,
                   was_settled=False)
    assert (got.state, got.additional) == (NEW, None)


def test_late_is_after_the_deadline_or_once_cancelled() -> None:
    deadline = datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert not is_late(deadline, deadline, cancelled=False)  # at the deadline: on time
    assert is_late(deadline + timedelta(microseconds=1), deadline, cancelled=False)
    assert is_late(deadline - timedelta(hours=1), deadline, cancelled=True)


def test_bounds_and_amount_due_are_exact() -> None:
    top = D("99999999999999999999.999999999999999999")
    least, most = bounds(top, D("0.01"))
    with localcontext(Context(prec=100)):  # wide enough to be exact, the rule's aside
        margin = top * D("0.0001")
        assert least == top - margin and most == top + margin
    assert bounds(D("0.000000000000000001"), D(0)) == (D("0.000000000000000001"),) * 2
    assert amount_due(D(100), D("90.5")) == D("9.5")
    assert amount_due(D(100), D(110)) == 0
