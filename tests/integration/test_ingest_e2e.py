"""End to end: a signed webhook -> outbox -> Debezium -> the Kafka topic, with headers."""

from __future__ import annotations

import json
import time
import uuid
from decimal import Decimal

import httpx
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from paystream import kafka_security
from paystream.kafka_nodes import kafka_bootstrap
from paystream.schema.events import PAYMENTS_TOPIC
from tests.support.ids import unique
from tests.support.ingest import (
    alchemy_body,
    alchemy_headers,
    erc20_activity,
    ingest_server,
    known_user,
    payment_body,
    payment_headers,
    random_address,
)

ARRIVAL_TIMEOUT_S = 60


def _consumer_at_end() -> Consumer:
    """A consumer of its own group, positioned at the current end of every partition,
    so it sees exactly what is produced after this call."""
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap(),
                         **kafka_security.client_config(kafka_security.ADMIN),
                         "group.id": unique("ingest-e2e"), "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        metadata = consumer.list_topics(PAYMENTS_TOPIC, timeout=10)
    except KafkaException as exc:
        consumer.close()
        pytest.fail(f"Kafka is not reachable at {kafka_bootstrap()} ({exc}); "
                    "run `paystream stack up`")
    topic = metadata.topics.get(PAYMENTS_TOPIC)
    if topic is None or topic.error is not None or not topic.partitions:
        consumer.close()
        pytest.fail(f"topic {PAYMENTS_TOPIC} does not exist; run `paystream stack up`")
    positions = []
    for partition in topic.partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(PAYMENTS_TOPIC, partition),
                                                 timeout=10)
        positions.append(TopicPartition(PAYMENTS_TOPIC, partition, high))
    consumer.assign(positions)
    return consumer


def _wait_for(consumer: Consumer, event_id: str):
    deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None or message.error() is not None:
            continue
        headers = {k: (v.decode() if v is not None else None)
                   for k, v in (message.headers() or [])}
        if headers.get("event_id") == event_id:
            return message, headers
    pytest.fail(f"event {event_id} did not reach {PAYMENTS_TOPIC} within "
                f"{ARRIVAL_TIMEOUT_S} s: is the Debezium connector running "
                "(`paystream stack status`)?")


def test_a_signed_deposit_reaches_kafka_keyed_by_user_with_its_trace(db) -> None:
    user, address = unique("user"), random_address()
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                    " VALUES ('ETH_MAINNET', %s, %s)", (address, user))
    activity = erc20_activity(address, 2_500_000, log_index=9)
    event_id = f"ETH_MAINNET:{activity['hash']}:log:9"
    trace_id = "e2e-" + uuid.uuid4().hex
    body = alchemy_body([activity])
    consumer = _consumer_at_end()
    try:
        with ingest_server() as srv:
            answer = httpx.post(srv.url + "/webhooks/alchemy", content=body,
                                headers=alchemy_headers(body) | {"x-request-id": trace_id})
            assert answer.status_code == 200, answer.text
        message, headers = _wait_for(consumer, event_id)
    finally:
        consumer.close()

    assert message.topic() == PAYMENTS_TOPIC
    assert message.key().decode() == user
    assert headers["trace_id"] == trace_id and headers["event_type"] == "deposit"
    uuid.UUID(headers["id"])  # the outbox row's id
    value = json.loads(message.value())
    with db.cursor() as cur:
        cur.execute("SELECT payload FROM payment_events WHERE event_id = %s", (event_id,))
        assert value == cur.fetchone()[0]  # PaymentEvent.to_wire(), as written
    assert value["amount"] == "2.5" and Decimal(value["amount"]) == Decimal("2.5")
    assert value["user_id"] == user and value["chain"]["log_index"] == 9


def test_a_duplicate_delivery_is_not_published_twice(db) -> None:
    event_id, user = unique("ev-e2e"), known_user()
    body = payment_body(event_id, user, "3.3")
    consumer = _consumer_at_end()
    try:
        with ingest_server() as srv:
            url = srv.url + "/webhooks/payments"
            statuses = [httpx.post(url, content=body, headers=payment_headers(body)).json()
                        ["status"] for _ in range(3)]
        assert statuses == ["accepted", "duplicate", "duplicate"]
        _wait_for(consumer, event_id)
        # Anything else for this event id within a few seconds would be a double publish.
        deadline, extra = time.monotonic() + 5, 0
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and \
                    (b"event_id", event_id.encode()) in (message.headers() or []):
                extra += 1
        assert extra == 0
    finally:
        consumer.close()
