"""Reading what the pipeline writes to a Kafka topic, from a test."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, TopicPartition

from paystream import kafka_security
from paystream.kafka_nodes import kafka_bootstrap
from tests.support.ids import unique


class TopicReader:
    """Reads what arrives on a topic after its creation: it starts at the current end
    of every partition, so earlier runs' messages do not interfere."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.consumer = Consumer({
            "bootstrap.servers": kafka_bootstrap(),
            **kafka_security.client_config(kafka_security.ADMIN),
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

    def read(self, count: int, timeout: float,
             match: Callable[[Message], bool] | None = None) -> list[Message]:
        """Messages (matching `match(msg)` if given) until `count` arrived or time is up."""
        found: list[Message] = []
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


def headers_of(msg: Any) -> dict[str, str]:
    """A Kafka message's headers as a str -> str dict (last value wins)."""
    return {k: (v.decode("utf-8") if v is not None else "") for k, v in (msg.headers() or [])}
