"""docker-compose.yml cannot run here (no Docker engine); these checks keep it in step
with the tested no-Docker configuration instead."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from paystream.connectors.registration import connector_config
from paystream.stack.kafka import CONFIG_DIR, TOPICS

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_connect_container_provides_every_variable_the_connector_json_reads():
    wanted = set()
    for value in connector_config().values():
        wanted |= set(re.findall(r"\$\{env:([A-Z_]+)\}", value))
    env = COMPOSE["services"]["connect"]["environment"]
    assert wanted, "the connector JSON should read the database address from the env"
    assert wanted <= set(env)
    assert env["CONNECT_CONFIG_PROVIDERS_ENV_CLASS"].endswith("EnvVarConfigProvider")


def test_images_are_the_versions_the_jar_manifest_resolves():
    pom = (ROOT / "connectors" / "pom.xml").read_text()
    kafka_version = re.search(r"<kafka.version>(.+?)</kafka.version>", pom).group(1)
    debezium_version = re.search(r"<debezium.version>(.+?)</debezium.version>", pom).group(1)
    services = COMPOSE["services"]
    assert services["kafka"]["image"] == f"apache/kafka:{kafka_version}"
    assert services["connect"]["image"] == f"quay.io/debezium/connect:{debezium_version}"
    assert services["postgres"]["image"] == "postgres:15"
    assert "wal_level=logical" in services["postgres"]["command"]


def test_broker_settings_match_the_local_broker():
    local = dict(
        line.split("=", 1)
        for line in (CONFIG_DIR / "server.properties").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    env = COMPOSE["services"]["kafka"]["environment"]
    for key in ("auto.create.topics.enable", "group.initial.rebalance.delay.ms",
                "offsets.topic.replication.factor", "min.insync.replicas"):
        compose_key = "KAFKA_" + key.upper().replace(".", "_")
        assert str(env[compose_key]).lower() == local[key].lower(), key


def test_setup_job_configures_the_same_topics_and_connector():
    setup = COMPOSE["services"]["setup"]
    assert setup["command"] == ["stack", "setup"]
    assert set(TOPICS) >= {"paystream.payments", "paystream.payments.dlq"}
