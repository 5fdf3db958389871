"""The ledger reads and plans every valid event: amounts added exactly whatever their
number of digits, and event ids of any printable form.

Found by tests/integration/test_cdc_hostile_payloads.py: a deposit of the largest valid
amount was dead-lettered (numeric field overflow), because Python's default decimal
context (28 significant digits) rounded 0 + 99999999999999999999.999999999999999999 up to
1E+20. Expected values here are written out by hand, not computed with Decimal.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from paystream.consumers.failures import PoisonError
from paystream.consumers.ledger.plan import Outcome, plan_batch, read_event
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


def test_a_quoted_event_id_matches_its_raw_header() -> None:
    """'"abc"' is a valid event id (printable ASCII) the gateway may send; Connect writes
    it to the header as is, and reading the header as a JSON string must not make the
    ledger dead-letter it as a header mismatch."""
    [candidate] = events(rec('"quoted-1"', "deposit", "u", "1"))
    assert candidate.event.event_id == '"quoted-1"'


def test_a_header_that_matches_in_neither_reading_is_still_a_mismatch() -> None:
    with pytest.raises(PoisonError) as refused:
        read_event(rec('"quoted-1"', "deposit", "u", "1",
                       headers={"event_id": '"quoted-2"', "event_type": "deposit"}))
    assert refused.value.reason == "header_mismatch"
