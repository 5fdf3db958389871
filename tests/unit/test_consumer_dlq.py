"""DLQ rate limit and the headers a dead letter carries."""

from __future__ import annotations

import json

import pytest

from paystream.consumers.dead_letters import send as dlq
from paystream.consumers.dead_letters.mirror import mirror_row
from paystream.consumers.dead_letters.send import (
    DeadLetter,
    DeadLetterProducer,
    DlqLimitExceededError,
    DlqRateLimit,
)
from paystream.consumers.failures import TransientError
from paystream.consumers.records import Origin, Record


def _record(value: bytes | None = b"{}", headers=(("event_id", b"e1"),)) -> Record:
    return Record(Origin("paystream.payments", 3, 41), b"u1", value, tuple(headers), 1000)


def test_rate_limit_allows_up_to_limit_within_window() -> None:
    limit = DlqRateLimit(limit=3, window_s=10)
    assert limit.remaining(now=0) == 3
    limit.record(2, now=0)
    assert limit.remaining(now=1) == 1
    limit.record(1, now=1)
    assert limit.remaining(now=2) == 0


def test_rate_limit_window_slides() -> None:
    limit = DlqRateLimit(limit=2, window_s=10)
    limit.record(2, now=0)
    assert limit.remaining(now=9.9) == 0
    assert limit.remaining(now=10.0) == 2  # the first two left the window


def test_limit_zero_allows_no_unexpected_dead_letter() -> None:
    assert DlqRateLimit(limit=0, window_s=60).remaining(now=0) == 0


def test_the_error_names_the_limit_and_the_causes() -> None:
    error = DlqRateLimit(limit=5, window_s=60).exceeded("db_rejected_22003 x6; first: out")
    assert isinstance(error, DlqLimitExceededError)
    assert "more than 5 unexpected failures within 60s" in str(error)
    assert "db_rejected_22003 x6" in str(error)


def test_dlq_headers_keep_origin_and_original_headers() -> None:
    letter = DeadLetter(_record(), "unknown_user", "user 'u1' does not exist")
    headers = dict(dlq.dlq_headers(letter, "ledger"))
    assert headers["event_id"] == b"e1"
    assert headers[dlq.H_SOURCE_TOPIC] == b"paystream.payments"
    assert headers[dlq.H_SOURCE_PARTITION] == b"3"
    assert headers[dlq.H_SOURCE_OFFSET] == b"41"
    assert headers[dlq.H_REASON] == b"unknown_user"
    attempts = json.loads(headers[dlq.H_ATTEMPTS])
    assert attempts[-1]["reason"] == "unknown_user" and attempts[-1]["group"] == "ledger"


class FakeProducer:
    """Stands in for confluent_kafka.Producer to exercise the delivery-report checks."""

    def __init__(self, error: str | None = None, stuck: int = 0) -> None:
        self.error, self.stuck, self.sent, self._callbacks = error, stuck, [], []

    def produce(self, topic, key, value, headers, on_delivery):
        self.sent.append((topic, key, value, headers))
        self._callbacks.append(on_delivery)

    def flush(self, _timeout):
        for cb in self._callbacks:
            cb(self.error, None)
        return self.stuck

    def poll(self, _timeout):
        return 0


def test_producer_requires_every_delivery_report() -> None:
    letters = [DeadLetter(_record(), "malformed_json", "x")]
    ok = FakeProducer()
    DeadLetterProducer(ok, "dlq", "ledger", 1).send(letters)
    assert ok.sent[0][0] == "dlq" and ok.sent[0][2] == b"{}"
    with pytest.raises(TransientError):
        DeadLetterProducer(FakeProducer(error="broker down"), "dlq", "g", 1).send(letters)
    with pytest.raises(TransientError):
        DeadLetterProducer(FakeProducer(stuck=1), "dlq", "g", 1).send(letters)


def test_mirror_row_reads_origin_and_tags_attempt_with_dlq_position() -> None:
    letter = DeadLetter(_record(value=b"\xff\x00garbage"), "malformed_json", "not JSON")
    dlq_record = Record(Origin("paystream.payments.dlq", 0, 7), b"u1", letter.record.value,
                        tuple(dlq.dlq_headers(letter, "ledger")), 2000)
    row = mirror_row(dlq_record)
    assert (row["source_topic"], row["source_partition"], row["source_offset"]) == \
        ("paystream.payments", 3, 41)
    assert row["error_reason"] == "malformed_json"
    assert row["payload"] == "\\xff\\x00garbage"  # escaped, storable as text
    assert row["event_id"] == "e1"
    assert json.loads(row["headers"]) == {"event_id": "e1"}
    attempts = json.loads(row["attempts"])
    assert attempts[-1]["dlq_offset"] == 7 and attempts[-1]["dlq_partition"] == 0


def test_mirror_row_of_a_foreign_record_uses_its_own_position() -> None:
    row = mirror_row(Record(Origin("x.dlq", 2, 5), None, b"hi", (), None))
    assert (row["source_topic"], row["source_partition"], row["source_offset"]) == ("x.dlq", 2, 5)
    assert row["error_reason"] == "unknown_origin"
