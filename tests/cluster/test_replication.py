"""A replicated cluster (docs/operations.md#a-replicated-cluster): three KRaft nodes,
every topic with three replicas and min.insync.replicas=2, Connect's producer idempotent
with acks=all.

What is checked comes from Kafka itself, not from paystream's code: the brokers'
metadata and topic configurations, Kafka's own quorum tool, the producer ids its
DumpLogSegments reads out of the segment files, the answers of producers that are not
paystream's. Nodes are stopped gracefully (SIGTERM: a controlled shutdown hands their
leaderships over) where a test needs a deterministic ISR, and SIGKILLed where it needs a
crash."""

from __future__ import annotations

import subprocess
import time
from decimal import Decimal
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from paystream import kafka_security
from paystream.chaos.processes import sigkill
from paystream.kafka_nodes import KafkaNode, kafka_bootstrap
from paystream.launch import paystream_argv
from paystream.schema.db import connect, database_url
from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.schema.outbox import WriteOutcome, write_event
from paystream.stack import kafka, quorum
from paystream.stack.kafka import (
    CONNECT_INTERNAL_TOPICS,
    DEBEZIUM_HEARTBEAT_TOPIC,
    TOPICS,
)
from paystream.stack.process import read_pid, stop_pids
from paystream.stack.settings import StackSettings
from tests.support.consumers import create_topic
from tests.support.ids import unique
from tests.support.kafka_tools import in_log, quorum_leader, record_batches
from tests.support.topics import TopicReader, headers_of
from tests.support.waiting import wait_for

ADMIN = kafka_security.client_config(kafka_security.ADMIN)
# How long a record that must not reach the topic is looked for: CDC takes ~10 ms
# (docs/benchmarks.md), so one that could pass would be there long before.
ABSENT_S = 8


def _status_rows() -> dict[str, list[str]]:
    done = subprocess.run(paystream_argv("stack", "status"), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}


def test_three_nodes_serve_and_one_of_them_is_the_active_controller(
        cluster: StackSettings, tmp_path: Path):
    rows = _status_rows()
    nodes = [f"kafka-{n.node_id}" for n in cluster.kafka_nodes]
    assert nodes == ["kafka-1", "kafka-2", "kafka-3"]
    active = [name for name in nodes if rows[name][4] == "healthy,active-controller"]
    assert len(active) == 1, rows
    assert all(rows[name][4].startswith("healthy") for name in nodes), rows
    assert [rows[name][1] for name in nodes] == [str(n.client_port) for n in cluster.kafka_nodes]
    # Kafka's own view: every node a live broker, and the same quorum leader.
    assert kafka.registered(cluster) == {1, 2, 3}
    assert active == [f"kafka-{quorum_leader(cluster, tmp_path)}"]


def test_every_topic_has_three_replicas_in_sync_and_min_isr_two(cluster: StackSettings):
    client = kafka.admin(cluster)
    # Debezium creates its heartbeat topic at its first heartbeat (every 10 s).
    wanted = (*TOPICS, *CONNECT_INTERNAL_TOPICS, DEBEZIUM_HEARTBEAT_TOPIC, "__consumer_offsets")
    md = wait_for("every topic to exist", lambda: (
        m if set(wanted) <= set((m := client.list_topics(timeout=10)).topics) else None),
        timeout=60, interval=1)
    for name in wanted:
        for pid, part in md.topics[name].partitions.items():
            assert sorted(part.replicas) == [1, 2, 3], (name, pid, part.replicas)
            assert sorted(part.isrs) == [1, 2, 3], (name, pid, part.isrs)
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in wanted]
    for resource, future in client.describe_configs(resources).items():
        config = future.result(30)
        assert config["min.insync.replicas"].value == "2", resource.name
        assert config["unclean.leader.election.enable"].value == "false", resource.name


def _write_event(user: str) -> PaymentEvent:
    """An event and its outbox row, committed as the ingest commits them."""
    event = PaymentEvent(unique("evt"), EventType.DEPOSIT, user, "USD", Decimal("1"),
                         "payments")
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            assert write_event(cur, event, unique("trace")) is WriteOutcome.ACCEPTED
    finally:
        conn.close()
    return event


def _of(event: PaymentEvent):
    return lambda msg: headers_of(msg).get("event_id") == event.event_id


def _stop(s: StackSettings, node: KafkaNode) -> None:
    """A graceful stop (a controlled shutdown) of one node."""
    assert stop_pids([kafka.pid_file(s, node)], timeout=60)


def _produce(topic: str, value: bytes, **conf: object) -> KafkaError | None:
    """One record; the error its delivery report gave (None: acknowledged)."""
    producer = Producer({"bootstrap.servers": kafka_bootstrap(), **ADMIN, **conf})
    producer.list_topics(topic, timeout=10)  # fresh metadata: the leader now
    result: list[KafkaError | None] = []
    producer.produce(topic, value=value, on_delivery=lambda err, _m: result.append(err))
    producer.flush(60)
    assert result, "no delivery report within 60 s"
    return result[0]


def _values(topic: str) -> list[bytes]:
    """Every value on partition 0 of `topic`, read from the beginning (once the
    partition has a leader that answers)."""
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap(), **ADMIN,
                         "group.id": unique("test-read"), "enable.auto.commit": False})

    def high_watermark() -> tuple[int] | None:
        try:
            # Fresh metadata first: librdkafka would keep asking a dead leader it knew.
            consumer.list_topics(topic, timeout=5)
            return (consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1],)
        except KafkaException:  # no leader yet: the old one is dead, not yet fenced
            return None

    try:
        [high] = wait_for(f"a leader of {topic}-0", high_watermark, timeout=90, interval=0.5)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < high and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def _min_isr(s: StackSettings, topic: str, value: str | None) -> None:
    """Set `topic`'s own min.insync.replicas, or drop it (None: the broker's default)."""
    op = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.insync.replicas", value or "", incremental_operation=op)])
    client = kafka.admin(s)  # keep a reference: a collected client cancels its futures
    for future in client.incremental_alter_configs([resource]).values():
        future.result(30)


def test_one_node_down_writes_go_on_two_down_they_are_refused_and_nothing_is_lost(
        cluster: StackSettings):
    """min.insync.replicas=2 with acks=all: with one node of three down every write is
    taken, CDC's included, in idempotent batches; with two down the one left refuses
    writes (NOT_ENOUGH_REPLICAS) rather than hold the only copy. Connect's producer
    writes with acks=all: while its topic asks for more replicas in sync than there are,
    its record is held back (acks=1 would be taken by the leader alone), then arrives
    once. Nothing is lost."""
    topic = unique("cluster-writes")
    create_topic(topic, 1)
    payments = TopicReader(PAYMENTS_TOPIC)
    try:
        leader = quorum.active_controller(cluster)
        assert leader is not None
        first, second = [n for n in cluster.kafka_nodes if n.node_id != leader.node_id]

        _stop(cluster, first)
        assert _produce(topic, b"one-down", acks="all", **{"enable.idempotence": True}) is None
        during = _write_event(unique("user"))
        [on_topic] = payments.read(1, timeout=60, match=_of(during))
        # Connect's producer is idempotent: its batch carries a producer id (-1 if not).
        holder = next(n for n in cluster.kafka_nodes if n != first)
        [batch] = [b for b in record_batches(cluster, holder.node_id, PAYMENTS_TOPIC)
                   if b.partition == on_topic.partition()
                   and b.first <= on_topic.offset() <= b.last]
        assert batch.producer_id >= 0, batch

        # Two replicas in sync, three asked for: an acks=all write is refused before
        # the leader appends it, so it is on no node's disk (acks=1 would be in the
        # leader's log, and its followers', waiting for the high watermark).
        _min_isr(cluster, PAYMENTS_TOPIC, "3")
        try:
            held = _write_event(unique("user"))
            assert payments.read(1, timeout=ABSENT_S, match=_of(held)) == []
            for node in cluster.kafka_nodes:
                if node != first:
                    assert not in_log(cluster, node.node_id, PAYMENTS_TOPIC, held.event_id)
        finally:
            _min_isr(cluster, PAYMENTS_TOPIC, None)
        assert len(payments.read(1, timeout=60, match=_of(held))) == 1

        _stop(cluster, second)
        refused = _produce(topic, b"two-down", acks="all", retries=0,
                           **{"enable.idempotence": False})
        assert refused is not None and refused.code() == KafkaError.NOT_ENOUGH_REPLICAS, refused
        withheld = _write_event(unique("user"))
        assert payments.read(1, timeout=ABSENT_S, match=_of(withheld)) == []

        kafka.start(cluster)
        assert len(payments.read(1, timeout=90, match=_of(withheld))) == 1
        # Once each: Connect's retries while nodes were away were deduplicated.
        assert payments.read(1, timeout=5, match=lambda m: _of(held)(m) or _of(withheld)(m)) == []
    finally:
        payments.close()
        kafka.start(cluster)
    assert _values(topic) == [b"one-down"]


def test_an_acknowledged_record_outlives_its_leaders_crash_and_restart(
        cluster: StackSettings):
    """acks=all: acknowledged means held by the in-sync replicas, so a SIGKILL of the
    leader right after the acknowledgement loses nothing; the record is read from the
    new leader while the old one is down, and once it is back."""
    topic = unique("cluster-crash")
    create_topic(topic, 1)
    assert _produce(topic, b"acknowledged", acks="all", **{"enable.idempotence": True}) is None
    md = kafka.admin(cluster).list_topics(topic, timeout=10).topics[topic].partitions[0]
    victim = next(n for n in cluster.kafka_nodes if n.node_id == md.leader)
    sigkill(read_pid(kafka.pid_file(cluster, victim)))

    def new_leader() -> int | None:
        client = kafka.admin(cluster)
        try:
            leader = client.list_topics(topic, timeout=5).topics[topic].partitions[0].leader
        except KafkaException:
            return None
        return leader if leader not in (victim.node_id, -1) else None

    # Once the controller has fenced the dead node (its session timeout, 9 s).
    wait_for(f"a new leader of {topic}-0", new_leader, timeout=90, interval=0.5)
    assert _values(topic) == [b"acknowledged"]

    kafka.start(cluster)
    wait_for(f"node {victim.node_id} back in sync",
             lambda: quorum.under_replicated(cluster, (topic,)) == [], timeout=120)
    assert _values(topic) == [b"acknowledged"]
