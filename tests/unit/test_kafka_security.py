"""The Kafka clients' security settings (paystream/kafka_security.py) and the stack's
refusal of a Kafka storage formatted without the SCRAM admin."""

from __future__ import annotations

import pytest

from paystream import credentials, kafka_security
from paystream.env import SettingsError
from paystream.stack import kafka
from paystream.stack.settings import StackSettings


@pytest.fixture
def secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("PAYSTREAM_STATE_DIR", str(tmp_path / "state"))
    for name in ("PAYSTREAM_SECRETS_DIR", "PAYSTREAM_KAFKA_SECURITY_PROTOCOL",
                 "PAYSTREAM_KAFKA_SASL_MECHANISM", "PAYSTREAM_KAFKA_USER",
                 "PAYSTREAM_KAFKA_PASSWORD_FILE", "PAYSTREAM_KAFKA_BROKERS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_a_role_is_its_own_scram_user_with_its_own_password(secrets) -> None:
    password = credentials.ensure_secret("kafka-health")
    assert kafka_security.client_config("health") == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "paystream-health", "sasl.password": password}


def test_a_missing_password_is_an_error_not_an_anonymous_client(secrets) -> None:
    with pytest.raises(credentials.MissingSecretError, match="kafka-ledger"):
        kafka_security.client_config("ledger")


def test_unknown_role_is_refused(secrets) -> None:
    with pytest.raises(ValueError):
        kafka_security.client_config("mallory")


def test_overrides_for_a_kafka_run_elsewhere(secrets, monkeypatch) -> None:
    pw = secrets / "pw"
    pw.write_text("s3cret\n")
    monkeypatch.setenv("PAYSTREAM_KAFKA_SECURITY_PROTOCOL", "sasl_ssl")
    monkeypatch.setenv("PAYSTREAM_KAFKA_SASL_MECHANISM", "SCRAM-SHA-256")
    monkeypatch.setenv("PAYSTREAM_KAFKA_USER", "ledger-prod")
    monkeypatch.setenv("PAYSTREAM_KAFKA_PASSWORD_FILE", str(pw))
    assert kafka_security.client_config("ledger") == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "ledger-prod", "sasl.password": "s3cret"}
    monkeypatch.setenv("PAYSTREAM_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT")
    assert kafka_security.client_config("ledger") == {"security.protocol": "PLAINTEXT"}
    monkeypatch.setenv("PAYSTREAM_KAFKA_SECURITY_PROTOCOL", "TLS")
    with pytest.raises(SettingsError, match="PAYSTREAM_KAFKA_SECURITY_PROTOCOL"):
        kafka_security.client_config("ledger")


def test_groups_map_to_principals() -> None:
    assert kafka_security.role_for_group("ledger") == "ledger"
    assert kafka_security.role_for_group("dlq-mirror") == "dlq-mirror"
    assert kafka_security.role_for_group("chaos-ledger-1") == "admin"


def test_acls_are_literal_and_only_connect_writes_the_payment_topics() -> None:
    bindings = kafka.acl_bindings()
    assert all(b.resource_pattern_type.name == "LITERAL" for b in bindings)
    assert all(b.name != "*" for b in bindings)
    writers = {b.principal for b in bindings
               if b.name in (kafka.PAYMENTS, kafka.NOTIFICATIONS)
               and b.operation.name in ("WRITE", "ALL")}
    assert writers == {"User:paystream-connect"}
    dlq_writers = {b.principal for b in bindings
                   if b.name == kafka.DLQ and b.operation.name in ("WRITE", "ALL")}
    assert dlq_writers == {"User:paystream-ledger"}


def test_old_storage_without_the_scram_admin_is_refused_untouched(secrets) -> None:
    s = StackSettings.from_env()
    s.kafka_data.mkdir(parents=True)
    meta = s.kafka_data / "meta.properties"
    meta.write_text("cluster.id=old\n")
    (s.kafka_data / "paystream.payments-0").mkdir()
    with pytest.raises(kafka.OldStorageError) as err:
        kafka.format_storage(s)
    message = str(err.value)
    assert "older paystream" in message and f"mv {s.kafka_data}" in message
    assert "paystream stack down" in message
    assert meta.read_text() == "cluster.id=old\n"
    assert (s.kafka_data / "paystream.payments-0").is_dir()
    with pytest.raises(kafka.OldStorageError):
        kafka.start(s)


def test_storage_formatted_with_the_admin_is_accepted(secrets) -> None:
    s = StackSettings.from_env()
    s.kafka_data.mkdir(parents=True)
    (s.kafka_data / "meta.properties").write_text("cluster.id=new\n")
    (s.state_dir / kafka.SCRAM_MARKER).write_text("new\n")
    assert kafka.format_storage(s) is False
