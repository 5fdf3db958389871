"""The ledger's plan adds amounts exactly, whatever their number of digits.

Found by tests/integration/test_cdc_hostile_payloads.py: a deposit of the largest valid
amount was dead-lettered (numeric field overflow), because Python's default decimal
context (28 significant digits) rounded 0 + 99999999999999999999.999999999999999999 up to
1E+20. Expected values here are written out by hand, not computed with Decimal.
"""

from __future__ import annotations

from decimal import Decimal

from paystream.consumers.ledger_plan import Outcome, plan_batch
from tests.unit.test_ledger_plan import events, rec

LARGEST = "99999999999999999999.999999999999999999"  # NUMERIC(38,18)'s largest


def test_the_largest_amount_is_planned_exactly() -> None:
    plan = plan_batch(events(rec("d1", "deposit", "u", LARGEST)), {})
    assert [o for _, o in plan.decisions] == [Outcome.APPLIED]
    assert str(plan.deltas[("u", "USDC")]) == LARGEST
    assert str(plan.closing[("u", "USDC")]) == LARGEST


def test_a_38_digit_balance_keeps_every_digit_through_debits_and_credits() -> None:
    opening = {("u", "USDC"): Decimal("12345678901234567890.123456789012345678")}
    plan = plan_batch(events(rec("w1", "withdrawal", "u", "0.000000000000000001"),
                             rec("d1", "deposit", "u", "1")), opening)
    assert [o for _, o in plan.decisions] == [Outcome.APPLIED, Outcome.APPLIED]
    assert str(plan.closing[("u", "USDC")]) == "12345678901234567891.123456789012345677"
    assert str(plan.deltas[("u", "USDC")]) == "0.999999999999999999"
