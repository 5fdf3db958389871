"""The order the commit protocol promises, and what the rebalance callbacks commit.

Fakes stand in for the client and the database connection only to record the order of
the calls; the protocol, the DLQ producer wrapper and the runtime's callbacks are the
real code (docs/guarantees.md)."""

from __future__ import annotations

import time

import psycopg2.errors
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from paystream.consumers.commit import CommitProtocol
from paystream.consumers.dead_letters.send import (
    DeadLetter,
    DeadLetterProducer,
    DlqLimitExceededError,
    DlqRateLimit,
)
from paystream.consumers.failures import TransientError
from paystream.consumers.handler import BatchResult
from paystream.consumers.records import Origin, Record
from paystream.consumers.runtime import BatchConsumer
from paystream.consumers.settings import ConsumerSettings


class Calls(list):
    """One log of every call the fakes see, in order."""


class FakeProducer:
    """librdkafka's producer: acknowledges (or fails) each message when flushed."""

    def __init__(self, calls: Calls, fail: bool = False) -> None:
        self.calls, self.fail, self._reports = calls, fail, []

    def produce(self, topic, key=None, value=None, headers=None, on_delivery=None):
        self.calls.append("dlq.produce")
        self._reports.append(on_delivery)

    def flush(self, timeout):
        self.calls.append("dlq.flush")
        for report in self._reports:
            report(KafkaError(KafkaError._MSG_TIMED_OUT) if self.fail else None, None)
        self._reports = []
        return 0


class FakeConn:
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def cursor(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def commit(self):
        self.calls.append("db.commit")

    def rollback(self):
        self.calls.append("db.rollback")

    def execute(self, sql):  # the savepoints of per-message isolation
        pass


class FakeDatabase:
    def __init__(self, calls: Calls) -> None:
        self.conn = FakeConn(calls)

    def connection(self):
        return self.conn

    def rollback_quietly(self):
        self.conn.rollback()


class FakeConsumer:
    """Offset commits: recorded; `retriable_for_s` answers a retriable error that long."""

    def __init__(self, calls: Calls, retriable_for_s: float = 0.0) -> None:
        self.calls, self.commits = calls, []
        self._until = time.monotonic() + retriable_for_s

    def commit(self, offsets, asynchronous):
        self.calls.append("kafka.commit")
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})
        if time.monotonic() < self._until:
            raise KafkaException(KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE))
        return [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in offsets]


class DeadLettersOne:
    """Applies a batch and dead-letters its first record."""

    name = "one-dead-letter"

    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def apply(self, cur, records):
        self.calls.append("handler.apply")
        result = BatchResult()
        result.dead_letters.append(DeadLetter(records[0], "poison", "test"))
        result.outcomes["applied"] += len(records) - 1
        return result


def _records(partition: int, count: int) -> list[Record]:
    return [Record(Origin("t", partition, i), b"k", b"v", (), None) for i in range(count)]


def _protocol(calls: Calls, consumer=None, fail_dlq=False) -> CommitProtocol:
    return CommitProtocol(
        group="g", consumer=consumer or FakeConsumer(calls), db=FakeDatabase(calls),
        handler=DeadLettersOne(calls),
        dlq=DeadLetterProducer(FakeProducer(calls, fail_dlq), "t.dlq", "g", flush_timeout_s=1),
        dlq_limit=DlqRateLimit(100, 60), commit_budget_s=1.0)


def test_dead_letters_are_acknowledged_before_the_db_commit_and_offsets_move_last():
    calls = Calls()
    _protocol(calls).process(_records(0, 3))
    assert calls == ["handler.apply", "dlq.produce", "dlq.flush", "db.commit", "kafka.commit"]


def test_an_unacknowledged_dead_letter_rolls_the_batch_back_and_moves_no_offset():
    calls = Calls()
    protocol = _protocol(calls, fail_dlq=True)
    with pytest.raises(TransientError):
        protocol.process(_records(0, 3))
    assert "db.commit" not in calls and "kafka.commit" not in calls
    assert calls[-1] == "db.rollback"
    assert protocol.pending == {}


class OverflowsOnOdd:
    """Raises as Postgres does on a numeric overflow for any batch holding an odd offset."""

    name = "overflows"

    def apply(self, cur, records):
        if any(r.origin.offset % 2 for r in records):
            raise psycopg2.errors.lookup("22003")("numeric field overflow")
        result = BatchResult()
        result.outcomes["applied"] += len(records)
        return result


def test_the_dlq_limit_commits_the_part_before_the_cut_then_stops_the_group():
    calls = Calls()
    consumer = FakeConsumer(calls)
    protocol = CommitProtocol(
        group="g", consumer=consumer, db=FakeDatabase(calls), handler=OverflowsOnOdd(),
        dlq=DeadLetterProducer(FakeProducer(calls), "t.dlq", "g", flush_timeout_s=1),
        dlq_limit=DlqRateLimit(2, 60), commit_budget_s=1.0)
    # Offsets 1 and 3 fail within the limit (2); 5 would be one past it: cut there.
    with pytest.raises(DlqLimitExceededError, match="db_rejected_22003 x3"):
        protocol.process(_records(0, 8))
    assert calls.count("dlq.produce") == 2 and "db.commit" in calls
    assert consumer.commits == [{("t", 0): 5}]  # offsets 0-4 done; 5 onwards read again


def _runtime(calls: Calls, consumer: FakeConsumer, session_timeout_ms: int = 3000):
    settings = ConsumerSettings(group="g", topics=("t",), dlq_topic="t.dlq",
                                session_timeout_ms=session_timeout_ms)
    runtime = BatchConsumer(settings, handler=None, db=object(), hooks=object())
    runtime._protocol = _protocol(calls, consumer=consumer)
    runtime._protocol.pending = {("t", 1): 10, ("t", 2): 20, ("t", 3): 30}
    return runtime


def test_on_revoke_commits_the_revoked_partitions_pending_offsets_and_forgets_them():
    calls = Calls()
    consumer = FakeConsumer(calls)
    runtime = _runtime(calls, consumer)
    runtime._on_revoke(consumer, [TopicPartition("t", 1), TopicPartition("t", 2)])
    assert consumer.commits == [{("t", 1): 10, ("t", 2): 20}]
    assert runtime._protocol.pending == {("t", 3): 30}  # still ours: kept for later


def test_on_revoke_gives_up_within_a_third_of_the_session_timeout():
    calls = Calls()
    consumer = FakeConsumer(calls, retriable_for_s=60)  # the coordinator never answers
    runtime = _runtime(calls, consumer, session_timeout_ms=3000)
    started = time.monotonic()
    runtime._on_revoke(consumer, [TopicPartition("t", 1)])
    took = time.monotonic() - started
    assert 0.9 <= took <= 1.6, took  # budget: 3000 ms / 3, then one last sleep at most
    assert len(consumer.commits) > 1  # it did retry within the budget
    # Not committed in time: left to the new owner, never committed later.
    assert ("t", 1) not in runtime._protocol.pending


def test_on_lost_never_commits_and_drops_the_lost_partitions_offsets():
    calls = Calls()
    consumer = FakeConsumer(calls)
    runtime = _runtime(calls, consumer)
    runtime._on_lost(consumer, [TopicPartition("t", 1), TopicPartition("t", 3)])
    assert consumer.commits == []
    assert runtime._protocol.pending == {("t", 2): 20}
