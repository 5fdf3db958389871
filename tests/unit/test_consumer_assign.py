"""Partitions assigned to the consumer are always readable: librdkafka keeps the paused
flag of a partition across lost/assign, so the runtime resumes what it is given."""

from __future__ import annotations

from confluent_kafka import TopicPartition

from paystream.consumers.runtime import BatchConsumer
from paystream.consumers.settings import ConsumerSettings


class RecordingConsumer:
    def __init__(self) -> None:
        self.resumed: list[TopicPartition] = []

    def resume(self, partitions: list[TopicPartition]) -> None:
        self.resumed.extend(partitions)


def test_assigned_partitions_are_resumed():
    runtime = BatchConsumer(ConsumerSettings(group="g", topics=("t",), dlq_topic="t.dlq"),
                            handler=None, db=object(), hooks=object())
    client = RecordingConsumer()
    parts = [TopicPartition("t", 1), TopicPartition("t", 3)]
    runtime._on_assign(client, parts)
    assert [(tp.topic, tp.partition) for tp in client.resumed] == [("t", 1), ("t", 3)]


def test_an_empty_assignment_resumes_nothing():
    runtime = BatchConsumer(ConsumerSettings(group="g", topics=("t",), dlq_topic="t.dlq"),
                            handler=None, db=object(), hooks=object())
    client = RecordingConsumer()
    runtime._on_assign(client, [])
    assert client.resumed == []
