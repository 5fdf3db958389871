"""Crashes and rebalances: every event is applied exactly once, no partition stalls."""

from __future__ import annotations

import time

from paystream.consumers.crash_hooks import AFTER_DB_COMMIT, BEFORE_DB_COMMIT
from tests.support.consumers import (
    assert_applied_exactly_once,
    committed,
    create_topic,
    create_users,
    drained,
    make_events,
    produce,
    store_events,
    wait_until,
    wire_message,
)
from tests.support.ids import unique


def _setup(db, count: int, users: int = 24):
    topic, group, dlq = unique("crash-topic"), unique("crash-group"), unique("crash-dlq")
    create_topic(topic)
    user_ids = [unique("crash-user") for _ in range(users)]
    with db.cursor() as cur:
        create_users(cur, user_ids)
    events = make_events(unique("crash-ev"), user_ids, count)
    with db.cursor() as cur:
        store_events(cur, events)  # as the ingest does: the ledger credits only these
    return topic, group, dlq, events


def _committed_total(group: str, topic: str) -> int:
    return sum(max(o, 0) for o in committed(group, topic, range(12)).values())


def _processed(db, events) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM processed_events WHERE event_id = ANY(%s)",
                    ([e.event_id for e in events],))
        return cur.fetchone()[0]


def _drain(pool, topic, group, dlq, timeout_s: float = 90):
    proc = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq)
    try:
        wait_until(lambda: drained(group, topic), timeout_s, f"group {group} to drain")
    except AssertionError:
        raise AssertionError(pool.logs()) from None
    assert proc.terminate() == 0, proc.tail()
    return proc


def test_crash_between_db_commit_and_offset_commit_applies_nothing_twice(db, pool) -> None:
    topic, group, dlq, events = _setup(db, 1200)
    produce(topic, (wire_message(e) for e in events))
    crashing = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq,
                          extra_args=["--batch-size", "100"], env={AFTER_DB_COMMIT: "2"})
    assert crashing.wait(60) == -9, crashing.tail()  # SIGKILLed itself
    # The second batch is in the database but its offsets never reached Kafka.
    in_db, in_kafka = _processed(db, events), _committed_total(group, topic)
    assert 0 < in_kafka < in_db, (in_kafka, in_db)
    survivor = _drain(pool, topic, group, dlq)
    with db.cursor() as cur:
        assert_applied_exactly_once(cur, events)
    redelivered = sum(e["outcomes"].get("duplicate", 0)
                      for e in survivor.events("batch_committed"))
    assert redelivered >= in_db - in_kafka > 0


def test_consumer_killed_mid_batch_rolls_back_and_is_redelivered(db, pool) -> None:
    topic, group, dlq, events = _setup(db, 1200)
    produce(topic, (wire_message(e) for e in events))
    crashing = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq,
                          extra_args=["--batch-size", "100"], env={BEFORE_DB_COMMIT: "3"})
    assert crashing.wait(60) == -9, crashing.tail()
    # Two batches were committed in both places; the third died with its transaction.
    assert _processed(db, events) == _committed_total(group, topic) > 0
    _drain(pool, topic, group, dlq)
    with db.cursor() as cur:
        assert_applied_exactly_once(cur, events)


def test_rebalance_between_two_processes_under_load(db, pool) -> None:
    topic, group, dlq, events = _setup(db, 8000, users=60)
    half = len(events) // 2
    produce(topic, (wire_message(e) for e in events[:half]))
    args = ["--batch-size", "200"]
    first = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq, extra_args=args)
    wait_until(lambda: _committed_total(group, topic) > 0, 30, "first commits")
    second = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq, extra_args=args)
    # Load keeps arriving while the group rebalances twice: the second process joins,
    # then the first one leaves (SIGTERM: finish the batch, commit, close).
    produce(topic, (wire_message(e) for e in events[half:]))
    wait_until(lambda: bool(second.events("partitions_assigned")), 30, "second to join")
    time.sleep(1.0)
    assert first.terminate() == 0, first.tail()
    try:
        wait_until(lambda: drained(group, topic), 90, "all partitions committed to the end")
        # The first may have finished its own partitions before it left: the topic is
        # drained before the second is given them, so wait for the hand-over itself.
        wait_until(lambda: len(second.events("partitions_assigned")) >= 2, 60,
                   "the second to take over the first's partitions")
    except AssertionError:
        raise AssertionError(pool.logs()) from None
    assert second.terminate() == 0, second.tail()
    with db.cursor() as cur:
        assert_applied_exactly_once(cur, events)
    assert first.events("partitions_revoked"), "the first process never gave up partitions"
    assert len(second.events("partitions_assigned")) >= 2, "the second never took over"
