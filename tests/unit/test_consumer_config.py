"""The consumer refuses configurations that would let offsets move on their own."""

from __future__ import annotations

import pytest

from paystream import credentials, kafka_security
from paystream.consumers.client import consumer_config, dlq_producer_config
from paystream.consumers.commit import first_offsets, next_offsets
from paystream.consumers.records import Origin, Record, header_text
from paystream.consumers.settings import ConfigError, ConsumerSettings


@pytest.fixture(autouse=True)
def _secrets(tmp_path, monkeypatch) -> None:
    """A secrets dir of this test's own (the consumer reads its Kafka password)."""
    monkeypatch.setenv("PAYSTREAM_SECRETS_DIR", str(tmp_path / "secrets"))
    for role in kafka_security.ROLES:
        credentials.ensure_secret(kafka_security.secret_name(role))


def _settings(**kw) -> ConsumerSettings:
    return ConsumerSettings(group="g", topics=("t",), dlq_topic="t.dlq",
                            bootstrap="127.0.0.1:1", **kw)


def test_safe_defaults() -> None:
    conf = consumer_config(_settings())
    assert conf["enable.auto.commit"] is False
    assert conf["enable.auto.offset.store"] is False
    assert conf["partition.assignment.strategy"] == "cooperative-sticky"


def test_each_group_authenticates_as_its_own_principal() -> None:
    ledger = ConsumerSettings(group="ledger", topics=("t",), dlq_topic="t.dlq")
    for conf in (consumer_config(ledger), dlq_producer_config(ledger)):
        assert conf["security.protocol"] == "SASL_PLAINTEXT"
        assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
        assert conf["sasl.username"] == "paystream-ledger"
        assert conf["sasl.password"] == credentials.read_secret("kafka-ledger")
    mirror = ConsumerSettings(group="dlq-mirror", topics=("t",), dlq_topic="t.dlq")
    assert consumer_config(mirror)["sasl.username"] == "paystream-dlq-mirror"
    # A group of a test, benchmark or chaos run has no ACLs of its own: the admin.
    assert consumer_config(_settings())["sasl.username"] == "paystream-admin"


def test_kip848_protocol() -> None:
    conf = consumer_config(_settings(group_protocol="consumer"))
    assert conf["group.protocol"] == "consumer"
    assert "partition.assignment.strategy" not in conf


@pytest.mark.parametrize("key", ["enable.auto.commit", "enable.auto.offset.store"])
def test_refuses_automatic_offsets(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        consumer_config(_settings(kafka_overrides=((key, "true"),)))


def test_refuses_dlq_equal_to_source_and_oversized_backoff() -> None:
    with pytest.raises(ConfigError):
        ConsumerSettings(group="g", topics=("t",), dlq_topic="t")
    with pytest.raises(ConfigError):
        _settings(backoff_max_s=40, max_poll_interval_ms=60_000)


def test_time_budgets_follow_kafka_settings() -> None:
    s = _settings(session_timeout_ms=9000, max_poll_interval_ms=40_000)
    assert s.revoke_commit_budget_s == 3.0
    assert s.commit_retry_budget_s == 10.0
    assert s.poll_keepalive_s <= 1.0


def _rec(p: int, o: int) -> Record:
    return Record(Origin("t", p, o), None, None, (), None)


def test_offsets_to_commit_and_rewind() -> None:
    batch = [_rec(0, 5), _rec(1, 9), _rec(0, 6), _rec(0, 7), _rec(1, 10)]
    assert next_offsets(batch) == {("t", 0): 8, ("t", 1): 11}
    assert first_offsets(batch) == {("t", 0): 5, ("t", 1): 9}


def test_header_text_accepts_raw_and_json_quoted() -> None:
    assert header_text(b"deposit") == "deposit"
    assert header_text(b'"deposit"') == "deposit"
    assert header_text(b'"') == '"'
