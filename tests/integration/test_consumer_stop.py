"""How a ledger process stops, and the group protocols it runs, against the real stack.

A signal that arrives mid-batch is the case that matters: the batch in hand is either
committed in both places or in neither. PAYSTREAM_TEST_PAUSE_BEFORE_DB_COMMIT holds a
batch applied but uncommitted while the test signals the process."""

from __future__ import annotations

import signal
import time

from confluent_kafka import ConsumerGroupType

from paystream.consumers.crash_hooks import PAUSE_BEFORE_DB_COMMIT
from tests.integration.test_consumer_crash import _committed_total, _processed, _setup
from tests.support.consumers import (
    admin,
    assert_applied_exactly_once,
    drained,
    produce,
    wait_until,
    wire_message,
)


def _index(lines: list[dict], name: str, nth: int = 0) -> int:
    hits = [i for i, line in enumerate(lines) if line.get("event") == name]
    assert len(hits) > nth, (name, nth, hits)
    return hits[nth]


def test_sigterm_mid_batch_finishes_the_batch_commits_it_and_leaves(db, pool) -> None:
    topic, group, dlq, events = _setup(db, 600)
    produce(topic, (wire_message(e) for e in events))
    proc = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq,
                      extra_args=["--batch-size", "100"], env={PAUSE_BEFORE_DB_COMMIT: "2:4"})
    wait_until(lambda: bool(proc.events("batch_committed")), 30, "the first batch")
    time.sleep(0.5)  # the second batch is applied and waits before its COMMIT
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, proc.tail()
    lines = proc.log_lines()
    # The signal came while batch 2 was in hand; it was finished, and nothing after it.
    assert _index(lines, "consumer_stopping") < _index(lines, "batch_committed", 1)
    batches = proc.events("batch_committed")
    assert len(batches) == 2, batches
    done = sum(b["size"] for b in batches)
    assert 0 < done < len(events)
    # Both batches are in the database AND their offsets reached Kafka before it left.
    assert _processed(db, events) == done == _committed_total(group, topic)
    assert proc.events("partitions_revoked"), "it never left the group"


def test_a_second_signal_exits_at_once_and_the_batch_in_hand_is_not_committed(db, pool):
    topic, group, dlq, events = _setup(db, 600)
    produce(topic, (wire_message(e) for e in events))
    proc = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq,
                      extra_args=["--batch-size", "100"], env={PAUSE_BEFORE_DB_COMMIT: "2:60"})
    wait_until(lambda: bool(proc.events("batch_committed")), 30, "the first batch")
    time.sleep(0.5)
    proc.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    signalled = time.monotonic()
    proc.proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 128 + signal.SIGTERM, proc.tail()
    assert time.monotonic() - signalled < 5  # not the 60 s the batch would have waited
    first = proc.events("batch_committed")
    assert len(first) == 1, first
    # Batch 2 died with its connection; only batch 1 is in the database and in Kafka.
    assert _processed(db, events) == first[0]["size"] == _committed_total(group, topic)


def test_the_kip848_group_protocol_shares_partitions_and_applies_once(db, pool) -> None:
    topic, group, dlq, events = _setup(db, 3000, users=40)
    args = ["--batch-size", "200", "--group-protocol", "consumer"]
    produce(topic, (wire_message(e) for e in events[:1500]))
    first = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq, extra_args=args)
    wait_until(lambda: _committed_total(group, topic) > 0, 30, "first commits")
    second = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq, extra_args=args)
    wait_until(lambda: any(e["partitions"] for e in second.events("partitions_assigned")),
               60, "the broker to give the second member partitions")
    # The broker's own description of the group: KIP-848's protocol, two members.
    client = admin()  # kept referenced: a collected client never completes its futures
    described = client.describe_consumer_groups([group])[group].result(timeout=30)
    assert described.type == ConsumerGroupType.CONSUMER, described.type
    assert len(described.members) == 2, described.members
    produce(topic, (wire_message(e) for e in events[1500:]))
    try:
        wait_until(lambda: drained(group, topic), 90, "both members to drain the topic")
    except AssertionError:
        raise AssertionError(pool.logs()) from None
    assert first.terminate() == 0, first.tail()
    assert second.terminate() == 0, second.tail()
    with db.cursor() as cur:
        assert_applied_exactly_once(cur, events)
    # Both members did work: the assignment really was shared.
    assert first.events("batch_committed") and second.events("batch_committed")
