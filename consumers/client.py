"""The confluent-kafka configuration every consumer group runs with, and its guard rails.

Offsets move only through consumers/commit.py, so auto-commit and the automatic offset
store must both be off: with the default store an offset is recorded before our code
has seen the message, and a crash then skips it. A configuration that turns either on
is refused rather than corrected, so a wrong deploy fails at start and not in an audit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer

from paystream import kafka_security
from paystream.consumers.settings import ConfigError, ConsumerSettings

# Properties whose value is fixed by the commit protocol.
REQUIRED_FALSE = ("enable.auto.commit", "enable.auto.offset.store")

# librdkafka properties: strings, numbers, booleans and callbacks in one dict (the
# client's own constructors take dict[str, Any]).
KafkaConfig = dict[str, Any]


def _is_true(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def consumer_config(settings: ConsumerSettings, *,
                    stats_cb: Callable[[str], None] | None = None,
                    error_cb: Callable[[KafkaError], None] | None = None) -> KafkaConfig:
    """The consumer configuration; raise ConfigError if it breaks the commit protocol.
    It authenticates as the group's principal (kafka_security.role_for_group)."""
    conf: KafkaConfig = {
        "bootstrap.servers": settings.bootstrap,
        **kafka_security.client_config(kafka_security.role_for_group(settings.group)),
        "group.id": settings.group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": settings.auto_offset_reset,
        "max.poll.interval.ms": settings.max_poll_interval_ms,
        "statistics.interval.ms": settings.statistics_interval_ms,
        # Debezium's producer may run transactions (exactly-once source): never read
        # records of an aborted transaction.
        "isolation.level": "read_committed",
        "client.id": f"paystream-{settings.group}",
    }
    if settings.group_protocol == "consumer":
        # KIP-848: the broker computes assignments incrementally; session timeout and
        # assignment strategy are broker-side settings under this protocol.
        conf["group.protocol"] = "consumer"
    else:
        conf["partition.assignment.strategy"] = "cooperative-sticky"
        conf["session.timeout.ms"] = settings.session_timeout_ms
        conf["heartbeat.interval.ms"] = max(500, settings.session_timeout_ms // 5)
    for key, value in settings.kafka_overrides:
        conf[key] = value
    validate_consumer_config(conf)
    if stats_cb is not None:
        conf["stats_cb"] = stats_cb
    if error_cb is not None:
        conf["error_cb"] = error_cb
    return conf


def validate_consumer_config(conf: KafkaConfig) -> None:
    for key in REQUIRED_FALSE:
        if key not in conf or _is_true(conf[key]):
            raise ConfigError(
                f"{key} must be false: offsets may only move after the DB commit "
                "(consumers/commit.py)"
            )


def make_consumer(conf: KafkaConfig) -> Consumer:
    validate_consumer_config(conf)
    return Consumer(conf)


def dlq_producer_config(settings: ConsumerSettings) -> KafkaConfig:
    """An idempotent producer acknowledged by all in-sync replicas, authenticated as the
    group's principal (the same as its consumer's)."""
    return {
        "bootstrap.servers": settings.bootstrap,
        **kafka_security.client_config(kafka_security.role_for_group(settings.group)),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        # A dead letter must be acknowledged within the poll interval; past that the
        # delivery report fails and the batch is retried (nothing committed).
        "message.timeout.ms": max(5_000, settings.max_poll_interval_ms // 4),
        "client.id": f"paystream-{settings.group}-dlq",
    }


def make_producer(conf: KafkaConfig) -> Producer:
    return Producer(conf)
