"""The reconcile that runs inside a running ledger process: a balance its postings do
not explain is reported (critical log line) on the next batch that touches it, and
reported resolved once repaired. Evidence: the ledger process's own log, after the test
changed a balance row behind the ledger's back."""

from __future__ import annotations

from decimal import Decimal

from paystream.schema.events import EventType, PaymentEvent
from tests.integration.test_consumer_crash import _setup
from tests.support.consumers import drained, produce, store_events, wait_until, wire_message
from tests.support.ids import unique


def _deposit(user: str) -> PaymentEvent:
    return PaymentEvent(unique("hot-ev"), EventType.DEPOSIT, user, "USDC", Decimal("1.25"),
                        "test")


def _send(db, topic: str, event: PaymentEvent) -> None:
    with db.cursor() as cur:
        store_events(cur, [event])
    produce(topic, [wire_message(event)])


def _reports(proc, name: str, user: str) -> list[dict]:
    return [e for e in proc.events(name) if e.get("user_id") == user]


def test_a_running_ledger_reports_a_tampered_balance_then_its_repair(db, pool) -> None:
    topic, group, dlq, events = _setup(db, 120, users=4)
    produce(topic, (wire_message(e) for e in events))
    proc = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq,
                      env={"PAYSTREAM_RECONCILE_INTERVAL_S": "0.2"})
    wait_until(lambda: drained(group, topic), 60, "the ledger to drain")
    victim = events[0].user_id
    assert not proc.events("reconciliation_mismatch"), "mismatch before any tampering"
    with db.cursor() as cur:
        cur.execute("UPDATE balances SET balance = balance + 7 WHERE user_id = %s"
                    " AND asset = 'USDC'", (victim,))
        assert cur.rowcount == 1
    _send(db, topic, _deposit(victim))  # touched again: the next check includes it
    wait_until(lambda: bool(_reports(proc, "reconciliation_mismatch", victim)), 30,
               "the ledger to report the tampered balance")
    found = _reports(proc, "reconciliation_mismatch", victim)[0]
    assert found["book"] == "available" and Decimal(found["difference"]).copy_abs() == 7
    with db.cursor() as cur:
        cur.execute("UPDATE balances SET balance = balance - 7 WHERE user_id = %s"
                    " AND asset = 'USDC'", (victim,))
    _send(db, topic, _deposit(victim))
    wait_until(lambda: bool(_reports(proc, "reconciliation_mismatch_resolved", victim)), 30,
               "the ledger to report the repair")
    assert proc.terminate() == 0, proc.tail()
