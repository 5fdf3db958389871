"""The commit protocol's pure parts: offset commit retries and per-message isolation."""

from __future__ import annotations

from types import SimpleNamespace

import psycopg2.errors
import pytest
from confluent_kafka import KafkaError, KafkaException

from paystream.consumers.commit import apply_with_isolation, commit_offsets
from paystream.consumers.dead_letters.send import DeadLetterKind
from paystream.consumers.failures import PoisonError
from paystream.consumers.handler import BatchResult
from paystream.consumers.records import Origin, Record


class FakeConsumer:
    """Answers commit() from a script of results: an exception or per-partition errors."""

    def __init__(self, script: list) -> None:
        self.script, self.calls = script, []

    def commit(self, offsets, asynchronous):
        assert asynchronous is False
        self.calls.append({(tp.topic, tp.partition): tp.offset for tp in offsets})
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        # TopicPartition.error is read-only: answer with look-alikes.
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=tp.offset,
                                error=KafkaError(step[tp.partition])
                                if tp.partition in step else None)
                for tp in offsets]


def test_commit_retries_retriable_partition_errors_only_for_those() -> None:
    consumer = FakeConsumer([{1: KafkaError.REQUEST_TIMED_OUT}, {}])
    failed = commit_offsets(consumer, {("t", 0): 5, ("t", 1): 9}, 5, "g")
    assert failed == {}
    assert consumer.calls == [{("t", 0): 5, ("t", 1): 9}, {("t", 1): 9}]


def test_commit_gives_up_on_non_retriable_errors_and_reports_them() -> None:
    consumer = FakeConsumer([{0: KafkaError.ILLEGAL_GENERATION, 1: KafkaError.NOT_COORDINATOR},
                             {}])
    failed = commit_offsets(consumer, {("t", 0): 5, ("t", 1): 9}, 5, "g")
    assert failed == {("t", 0): 5}


def test_commit_request_error_retried_then_budget_exhausted() -> None:
    timeout = KafkaException(KafkaError(KafkaError._TIMED_OUT))
    consumer = FakeConsumer([timeout] * 100)
    failed = commit_offsets(consumer, {("t", 0): 5}, 0.2, "g")
    assert failed == {("t", 0): 5} and len(consumer.calls) >= 2


def test_no_offset_means_nothing_to_commit() -> None:
    consumer = FakeConsumer([KafkaException(KafkaError(KafkaError._NO_OFFSET))])
    assert commit_offsets(consumer, {("t", 0): 5}, 5, "g") == {}


class FakeCursor:
    def __init__(self, log):
        self.log = log

    def execute(self, sql, *_):
        self.log.append(sql)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FakeConn:
    def __init__(self):
        self.log = []

    def cursor(self):
        return FakeCursor(self.log)

    def rollback(self):
        self.log.append("ROLLBACK")


class PickyHandler:
    """Fails a batch containing 'bad' like a constraint violation would."""

    name = "picky"

    def __init__(self, error: Exception):
        self.error = error

    def apply(self, cur, records):
        if any(r.value == b"bad" for r in records):
            raise self.error
        result = BatchResult()
        result.outcomes["applied"] += len(records)
        return result


def _recs(*values: bytes) -> list[Record]:
    return [Record(Origin("t", 0, i), None, v, (), None) for i, v in enumerate(values)]


def test_deterministic_batch_failure_isolates_the_message_with_savepoints() -> None:
    conn = FakeConn()
    handler = PickyHandler(psycopg2.errors.lookup("23514")("check violated"))
    result = apply_with_isolation(conn, handler, _recs(b"ok", b"bad", b"ok"))
    assert result.outcomes["applied"] == 2
    [letter] = result.dead_letters
    assert letter.record.origin.offset == 1 and letter.reason == "db_rejected_23514"
    assert letter.attempts[0]["phase"] == "batch"
    assert conn.log[0] == "ROLLBACK"
    assert conn.log.count("SAVEPOINT paystream_message") == 3
    assert conn.log.count("ROLLBACK TO SAVEPOINT paystream_message") == 1


def test_poison_raised_by_a_handler_keeps_its_reason() -> None:
    result = apply_with_isolation(FakeConn(), PickyHandler(PoisonError("unknown_user", "u")),
                                  _recs(b"bad"))
    assert [(d.reason, d.detail) for d in result.dead_letters] == [("unknown_user", "u")]


def test_transient_failure_is_not_isolated_but_raised() -> None:
    handler = PickyHandler(psycopg2.errors.lookup("40P01")("deadlock"))
    with pytest.raises(psycopg2.errors.lookup("40P01")):
        apply_with_isolation(FakeConn(), handler, _recs(b"ok", b"bad"))


def test_a_verdict_is_judged_and_anything_else_raised_is_unexpected() -> None:
    judged = apply_with_isolation(FakeConn(), PickyHandler(PoisonError("forged", "f")),
                                  _recs(b"bad"))
    unexpected = apply_with_isolation(
        FakeConn(), PickyHandler(psycopg2.errors.lookup("22003")("overflow")), _recs(b"bad"))
    assert [d.kind for d in judged.dead_letters] == [DeadLetterKind.JUDGED]
    assert [d.kind for d in unexpected.dead_letters] == [DeadLetterKind.UNEXPECTED]
    assert unexpected.dead_letters[0].reason == "db_rejected_22003"


def test_the_batch_is_cut_at_the_unexpected_failure_past_the_budget() -> None:
    conn = FakeConn()
    handler = PickyHandler(psycopg2.errors.lookup("22003")("overflow"))
    result = apply_with_isolation(conn, handler, _recs(b"ok", b"bad", b"ok", b"bad", b"ok"),
                                  budget=1)
    # The second failure would be one over the budget: it and what follows are left.
    assert result.cut == 3 and "db_rejected_22003 x2" in result.cut_cause
    assert [d.record.origin.offset for d in result.dead_letters] == [1]
    assert result.outcomes["applied"] == 2
    assert conn.log.count("SAVEPOINT paystream_message") == 4


def test_verdicts_never_use_the_budget() -> None:
    result = apply_with_isolation(FakeConn(), PickyHandler(PoisonError("forged", "f")),
                                  _recs(b"bad", b"bad", b"ok"), budget=0)
    assert result.cut is None and len(result.dead_letters) == 2
