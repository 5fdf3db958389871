"""Duplicate delivery: one event, ten times on the topic, ten consumer processes."""

from __future__ import annotations

from decimal import Decimal

from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.schema.idempotency import idempotency_key
from paystream.schema.outbox import emit, write_event
from paystream.stack.kafka import start_group_at_end
from tests.support.consumers import (
    create_users,
    drained,
    end_offsets,
    wait_until,
)
from tests.support.ids import unique


def test_same_event_ten_times_by_ten_processes_credits_once(db, pool) -> None:
    user = unique("dup-user")
    event = PaymentEvent(unique("dup-ev"), EventType.DEPOSIT, user, "USDC", Decimal("12.5"),
                         "test")
    groups = [unique("dup-group") for _ in range(10)]
    dlq_topic = unique("dup-dlq")
    for group in groups:
        before = start_group_at_end(group, PAYMENTS_TOPIC)
    # Ten processes, each its own group, so each of them reads all ten copies: the
    # same key is claimed concurrently by up to ten transactions.
    procs = [pool.start("ledger", topic=PAYMENTS_TOPIC, group=g, dlq_topic=dlq_topic,
                        extra_args=["--batch-timeout", "0.05"]) for g in groups]
    with db.cursor() as cur:
        create_users(cur, [user])
    # Ten emissions of one event through the real outbox -> Debezium path: the first
    # as ingest writes it, nine more as an at-least-once relay would repeat it.
    conn = db
    conn.autocommit = False
    with conn.cursor() as cur:
        write_event(cur, event, "trace-dup")
        for _ in range(9):
            emit(cur, aggregatetype="payments", aggregateid=user,
                 event_type=event.event_type.value, event_id=event.event_id,
                 payload=event.to_wire(), trace_id="trace-dup")
    conn.commit()
    conn.autocommit = True

    def all_groups_done() -> bool:
        return all(drained(g, PAYMENTS_TOPIC) for g in groups)

    try:
        # Debezium first has to carry the ten copies to the topic.
        wait_until(lambda: sum(end_offsets(PAYMENTS_TOPIC).values()) >= sum(before.values()) + 10,
                   60, "the ten copies on the topic")
        wait_until(all_groups_done, 90, "ten groups to commit past the ten copies")
    except AssertionError:
        raise AssertionError(pool.logs()) from None
    assert all(p.alive() for p in procs), pool.logs()
    with db.cursor() as cur:
        cur.execute("SELECT balance FROM balances WHERE user_id = %s", (user,))
        assert cur.fetchall() == [(Decimal("12.5"),)]
        cur.execute("SELECT count(*) FROM user_entries"
                    " WHERE book = 'available' AND source_event_id = %s",
                    (event.event_id,))
        assert cur.fetchone() == (1,)
        cur.execute("SELECT outcome FROM processed_events WHERE idempotency_key = %s",
                    (idempotency_key(event.event_id, "deposit"),))
        assert cur.fetchall() == [("applied",)]
        cur.execute("SELECT status FROM event_status WHERE event_id = %s", (event.event_id,))
        assert cur.fetchone() == ("applied",)
    for proc in procs:
        assert proc.terminate() == 0, proc.tail()
    # 100 deliveries in all: one applied, 99 recognised as duplicates.
    outcomes = [e["outcomes"] for p in procs for e in p.events("batch_committed")]
    assert sum(o.get("applied", 0) for o in outcomes) == 1
    assert sum(o.get("duplicate", 0) for o in outcomes) == 99
