"""Ledger batch planning: reading events, de-duplication, ordering, aggregation."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from paystream.consumers.failures import PoisonError
from paystream.consumers.ledger.plan import Outcome, dedupe, plan_batch, read_event
from paystream.consumers.records import Origin, Record

_offset = 0


def rec(event_id: str, event_type: str, user: str, amount: object, asset: str = "USDC",
        headers: dict | None = None, key: str | None = None, raw: bytes | None = None) -> Record:
    global _offset
    _offset += 1
    body = {"event_id": event_id, "event_type": event_type, "user_id": user, "asset": asset,
            "amount": amount, "provider": "test"}
    hdrs = {"event_id": event_id, "event_type": event_type, "trace_id": "t-" + event_id}
    if headers is not None:
        hdrs = headers
    value = raw if raw is not None else json.dumps(body).encode()
    return Record(Origin("t", 0, _offset), (key or user).encode(), value,
                  tuple((k, v.encode()) for k, v in hdrs.items()), None)


def events(*records: Record):
    return [read_event(r) for r in records]


@pytest.mark.parametrize(("record", "reason"), [
    (rec("e", "deposit", "u", "1", raw=b"\xff\xfe not json"), "malformed_json"),
    (rec("e", "deposit", "u", 1.5), "invalid_amount"),
    (rec("e", "deposit", "u", "-1"), "invalid_amount"),
    (rec("e", "bonus", "u", "1", headers={"event_id": "e", "event_type": "bonus"}),
     "unknown_event_type"),
    (rec("e", "deposit", "u", "1", headers={"event_type": "deposit"}), "missing_header"),
    (rec("e", "deposit", "u", "1", headers={"event_id": "x", "event_type": "deposit"}),
     "header_mismatch"),
    (rec("e", "deposit", "u", "1", key="someone-else"), "key_mismatch"),
    (rec("e", "deposit", "u", "1", raw=b"[1, 2]"), "malformed"),
])
def test_poison_reasons(record: Record, reason: str) -> None:
    with pytest.raises(PoisonError) as info:
        read_event(record)
    assert info.value.reason == reason


def test_empty_value_is_poison() -> None:
    r = Record(Origin("t", 0, 1), b"u", None, (), None)
    with pytest.raises(PoisonError, match="empty_value"):
        read_event(r)


def test_read_event_keeps_trace_id() -> None:
    c = read_event(rec("e1", "deposit", "u1", "2.50"))
    assert c.trace_id == "t-e1" and c.event.amount == Decimal("2.5")


def test_dedupe_keeps_first_occurrence_in_order() -> None:
    a1, b, a2 = events(rec("a", "deposit", "u", "1"), rec("b", "deposit", "u", "2"),
                       rec("a", "deposit", "u", "1"))
    unique, repeats = dedupe([a1, b, a2])
    assert [c.event.event_id for c in unique] == ["a", "b"]
    assert repeats == [a2]


def test_same_event_id_other_type_is_another_key() -> None:
    w, fee = events(rec("w1", "withdrawal", "u", "1"), rec("w1", "withdrawal_fee", "u", "1"))
    unique, repeats = dedupe([w, fee])
    assert len(unique) == 2 and not repeats


def test_withdrawal_sees_deposit_before_it_in_the_batch() -> None:
    cands = events(rec("d1", "deposit", "u", "10"), rec("w1", "withdrawal", "u", "7"),
                   rec("w2", "withdrawal", "u", "5"), rec("f1", "withdrawal_fee", "u", "3"))
    plan = plan_batch(cands, {})
    assert [o for _, o in plan.decisions] == [
        Outcome.APPLIED, Outcome.APPLIED, Outcome.INSUFFICIENT_FUNDS, Outcome.APPLIED]
    assert plan.deltas == {("u", "USDC"): Decimal(0)}
    assert plan.sorted_deltas() == []  # nets to zero: no UPDATE needed
    assert plan.closing[("u", "USDC")] == Decimal(0)


def test_withdrawal_before_deposit_is_rejected_even_if_batch_total_suffices() -> None:
    cands = events(rec("w1", "withdrawal", "u", "5"), rec("d1", "deposit", "u", "10"))
    plan = plan_batch(cands, {})
    assert [o for _, o in plan.decisions] == [Outcome.INSUFFICIENT_FUNDS, Outcome.APPLIED]
    assert plan.deltas == {("u", "USDC"): Decimal(10)}


def test_aggregates_per_user_and_asset_sorted() -> None:
    cands = events(rec("1", "deposit", "zed", "1"), rec("2", "airdrop", "amy", "2", "ETH"),
                   rec("3", "deposit", "amy", "3"), rec("4", "deposit", "zed", "4"),
                   rec("5", "withdrawal", "amy", "1.5", "ETH"))
    plan = plan_batch(cands, {("amy", "ETH"): Decimal("1")})
    assert plan.sorted_deltas() == [(("amy", "ETH"), Decimal("0.5")),
                                    (("amy", "USDC"), Decimal(3)),
                                    (("zed", "USDC"), Decimal(5))]


def test_opening_balance_funds_debits_and_never_goes_negative() -> None:
    cands = events(*[rec(f"w{i}", "withdrawal", "u", "3") for i in range(5)])
    plan = plan_batch(cands, {("u", "USDC"): Decimal("10")})
    outcomes = [o for _, o in plan.decisions]
    assert outcomes.count(Outcome.APPLIED) == 3
    assert plan.closing[("u", "USDC")] == Decimal(1)
    assert len(plan.with_outcome(Outcome.INSUFFICIENT_FUNDS)) == 2


def test_exact_decimal_arithmetic() -> None:
    cands = events(rec("d", "deposit", "u", "0.1"), rec("d2", "deposit", "u", "0.2"),
                   rec("w", "withdrawal", "u", "0.3"))
    plan = plan_batch(cands, {})
    assert [o for _, o in plan.decisions][-1] is Outcome.APPLIED
    assert plan.closing[("u", "USDC")] == Decimal(0)
