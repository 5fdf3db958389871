"""The broker authenticates every client and each principal may do only its own job
(docs/operations.md#who-may-do-what-on-kafka-and-connect): nobody but Connect writes the
payments topic, the ledger reads it with its own group and writes dead letters, and a
wrong or missing password gets nothing. Real broker, real principals (stack/kafka.py
ACLS)."""

from __future__ import annotations

import os
import subprocess
import time
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from paystream import kafka_security
from paystream.consumers.client import dlq_producer_config
from paystream.consumers.dead_letters.send import DeadLetter, DeadLetterProducer
from paystream.consumers.records import Origin, Record
from paystream.consumers.settings import ConsumerSettings
from paystream.kafka_nodes import kafka_bootstrap
from paystream.schema.events import PAYMENTS_DLQ_TOPIC, PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.schema.outbox import WriteOutcome, write_event
from paystream.stack.kafka import kcat_config_file, kcat_env
from paystream.stack.settings import StackSettings
from tests.support.ids import unique
from tests.support.topics import headers_of

AUTH_ERRORS = (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED)


def _produce(conf: dict[str, Any], topic: str, timeout_s: float = 15
             ) -> tuple[KafkaError | None, list[KafkaError]]:
    """Produce one record; (its delivery error or None, the client's global errors)."""
    seen: list[KafkaError] = []
    reports: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": kafka_bootstrap(), "acks": "all",
                         "message.timeout.ms": int(timeout_s * 1000), "log_level": 0,
                         "error_cb": seen.append, **conf})
    producer.produce(topic, key=b"security-test", value=b"{}",
                     on_delivery=lambda err, _msg: reports.append(err))
    producer.flush(timeout_s + 10)
    assert len(reports) == 1, "no delivery report"
    return reports[0], seen


def _as(role: str) -> dict[str, Any]:
    return kafka_security.client_config(role)


def _consumer(role: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": kafka_bootstrap(), "group.id": group,
                     "enable.auto.commit": False, "log_level": 0,
                     "socket.timeout.ms": 10_000, **_as(role)})


def test_an_unauthenticated_producer_cannot_write_payments() -> None:
    err, seen = _produce({"security.protocol": "PLAINTEXT"}, PAYMENTS_TOPIC, timeout_s=5)
    assert err is not None
    assert err.code() == KafkaError._MSG_TIMED_OUT
    # The broker hangs up on a client that does not authenticate: never connected.
    assert seen and all(e.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
                        for e in seen), seen


def test_a_wrong_password_is_refused() -> None:
    conf = {**_as("ledger"), "sasl.password": "not-the-password"}
    err, seen = _produce(conf, PAYMENTS_DLQ_TOPIC, timeout_s=5)
    assert err is not None
    assert any(e.code() in AUTH_ERRORS for e in seen), seen


def test_an_unknown_user_is_refused() -> None:
    conf = {**_as("ledger"), "sasl.username": "mallory"}
    err, seen = _produce(conf, PAYMENTS_DLQ_TOPIC, timeout_s=5)
    assert err is not None
    assert any(e.code() in AUTH_ERRORS for e in seen), seen


@pytest.mark.parametrize("role", ["ledger", "dlq-mirror", "health"])
def test_no_consumer_principal_can_write_payments(role: str) -> None:
    err, _seen = _produce(_as(role), PAYMENTS_TOPIC)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, err


def test_the_ledger_writes_dead_letters_the_mirror_reads_them() -> None:
    settings = ConsumerSettings(group="ledger", topics=(PAYMENTS_TOPIC,),
                                dlq_topic=PAYMENTS_DLQ_TOPIC)
    conf = dlq_producer_config(settings)
    assert conf["sasl.username"] == "paystream-ledger"
    offsets: list[TopicPartition] = []
    producer = Producer(conf)
    marker = unique("security-dl")
    record = Record(Origin(PAYMENTS_TOPIC, 0, 0), marker.encode(), b"not json",
                    (("event_id", marker.encode()),), None)
    DeadLetterProducer(producer, PAYMENTS_DLQ_TOPIC, "ledger", 30).send(
        [DeadLetter(record, "security_test", "written by test_kafka_security")])
    # Find it as the mirror would: the DLQ mirror's principal reads the DLQ.
    mirror = _consumer("dlq-mirror", "dlq-mirror")
    try:
        md = mirror.list_topics(PAYMENTS_DLQ_TOPIC, timeout=10).topics[PAYMENTS_DLQ_TOPIC]
        for p in md.partitions:
            low, high = mirror.get_watermark_offsets(
                TopicPartition(PAYMENTS_DLQ_TOPIC, p), timeout=10)
            offsets.append(TopicPartition(PAYMENTS_DLQ_TOPIC, p, max(low, high - 5)))
        mirror.assign(offsets)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            msg = mirror.poll(1)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            if msg.key() == marker.encode():
                break
        else:
            pytest.fail("the dead letter did not reach the mirror's principal")
    finally:
        mirror.close()


def test_the_ledger_reads_payments_with_its_group_and_no_other(db) -> None:
    # An event through the real pipeline (outbox -> Debezium -> paystream.payments).
    event = PaymentEvent(unique("evt"), EventType.DEPOSIT, unique("user"), "USD",
                         Decimal("1.5"), "payments")
    ledger = _consumer("ledger", "ledger")
    try:
        md = ledger.list_topics(PAYMENTS_TOPIC, timeout=10).topics[PAYMENTS_TOPIC]
        parts = [TopicPartition(PAYMENTS_TOPIC, p) for p in sorted(md.partitions)]
        ends = [TopicPartition(PAYMENTS_TOPIC, tp.partition,
                               ledger.get_watermark_offsets(tp, timeout=10)[1])
                for tp in parts]
        # The group's committed offsets: OffsetFetch needs the group ACL. Never joining
        # the group (assign, not subscribe) leaves a running ledger undisturbed.
        ledger.committed(parts, timeout=10)
        with db.cursor() as cur:
            cur.execute("BEGIN")
            assert write_event(cur, event, unique("trace")) is WriteOutcome.ACCEPTED
            cur.execute("COMMIT")
        ledger.assign(ends)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = ledger.poll(1)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            if headers_of(msg).get("event_id") == event.event_id:
                break
        else:
            pytest.fail("the ledger's principal did not read the event")
    finally:
        ledger.close()
    for group in ("dlq-mirror", unique("other-group")):
        other = _consumer("ledger", group)
        try:
            # The broker refuses the group before any join (FindCoordinator): a running
            # mirror is not disturbed.
            other.subscribe([PAYMENTS_TOPIC])
            assert _first_error(other) == KafkaError.GROUP_AUTHORIZATION_FAILED
        finally:
            other.close()


def _first_error(consumer: Consumer, timeout_s: float = 20) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(1)
        if msg is not None and msg.error() is not None:
            return int(msg.error().code())
    return None


def test_the_mirror_cannot_even_see_payments() -> None:
    mirror = _consumer("dlq-mirror", "dlq-mirror")
    try:
        meta = mirror.list_topics(PAYMENTS_TOPIC, timeout=10).topics[PAYMENTS_TOPIC]
        assert meta.error is not None
        assert meta.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        mirror.close()


def test_kcat_reads_with_the_config_file_and_without_it_gets_nothing() -> None:
    s = StackSettings.from_env()
    conf = kcat_config_file()
    assert conf.stat().st_mode & 0o777 == 0o600
    env = {**os.environ, **kcat_env(s)}
    listed = subprocess.run(["kcat", "-F", str(conf), "-L", "-t", PAYMENTS_TOPIC],
                            capture_output=True, text=True, timeout=30, env=env)
    assert listed.returncode == 0, listed.stderr
    assert f'topic "{PAYMENTS_TOPIC}" with {s.partitions} partitions' in listed.stdout
    bare = subprocess.run(["kcat", "-b", kafka_bootstrap(), "-L", "-m", "5"],
                          capture_output=True, text=True, timeout=30, env=env)
    assert bare.returncode != 0
