"""Shared fixtures. Integration tests never skip: a missing service fails the test,
with the command that starts it (`paystream stack up`, which `make test` runs first)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg2
import pytest

from paystream.schema.db import connect, database_url


def unique(prefix: str) -> str:
    """An id no other test (or earlier run) uses: tests share one stack."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def db() -> Iterator[psycopg2.extensions.connection]:
    """An autocommit connection to the stack's Postgres; fails if it is not running."""
    try:
        conn = connect(database_url())
    except psycopg2.OperationalError as exc:
        pytest.fail(f"Postgres is not reachable at {database_url()} ({exc}); "
                    "run `paystream stack up` (make test does)")
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


class TopicReader:
    """Reads what arrives on a topic after its creation: it starts at the current end
    of every partition, so earlier runs' messages do not interfere."""

    def __init__(self, topic: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from paystream.schema.db import kafka_bootstrap

        self.topic = topic
        self.consumer = Consumer({
            "bootstrap.servers": kafka_bootstrap(),
            "group.id": unique("test-reader"),
            "enable.auto.commit": False,
            "log_level": 2,
        })
        try:
            md = self.consumer.list_topics(topic, timeout=10)
        except Exception as exc:  # any client error here means "no broker"
            pytest.fail(f"Kafka is not reachable at {kafka_bootstrap()} ({exc}); "
                        "run `paystream stack up` (make test does)")
        if md.topics[topic].error is not None:
            pytest.fail(f"topic {topic} is missing: {md.topics[topic].error}")
        parts = []
        for p in sorted(md.topics[topic].partitions):
            _, high = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            parts.append(TopicPartition(topic, p, high))
        self.consumer.assign(parts)

    def read(self, count: int, timeout: float, match=None) -> list:
        """Messages (matching `match(msg)` if given) until `count` arrived or time is up."""
        import time

        found = []
        deadline = time.monotonic() + timeout
        while len(found) < count and time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            if match is None or match(msg):
                found.append(msg)
        return found

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def topic_reader():
    """Factory: `reader = topic_reader("paystream.payments")`; closed after the test."""
    readers: list[TopicReader] = []

    def make(topic: str) -> TopicReader:
        reader = TopicReader(topic)
        readers.append(reader)
        return reader

    yield make
    for reader in readers:
        reader.close()


def headers_of(msg) -> dict[str, str]:
    """A Kafka message's headers as a str -> str dict (last value wins)."""
    return {k: (v.decode("utf-8") if v is not None else "") for k, v in (msg.headers() or [])}


def paystream_cmd(*args: str) -> list[str]:
    """The `paystream` command line, run with this interpreter (no PATH needed)."""
    import sys

    return [sys.executable, "-m", "paystream.cli", *args]
