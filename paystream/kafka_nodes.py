"""Where Kafka is: the bootstrap servers every Kafka client uses and the local cluster's
shape (how many KRaft nodes, where each listens, the replication its topics get).

One node (the default) or a replicated cluster (`paystream stack up --brokers 3`, or
PAYSTREAM_KAFKA_BROKERS=3). Every node is a combined broker + controller; node n (1..N)
takes clients on PAYSTREAM_KAFKA_PORT + (n-1) x PAYSTREAM_KAFKA_PORT_STEP and its
controller peers on PAYSTREAM_CONTROLLER_PORT + (n-1) x step (step 10 by default: 9092 /
9093, 9102 / 9103, 9112 / 9113, clear of the test stack's 9094 / 9095).

The count is fixed when the storage is formatted (a static voter set), so `stack up`
records it in the state dir, and every later process of that stack (status, down, the
consumers, the chaos run) finds it there without being told again; the variable, when
set, wins (and `stack up` refuses one that contradicts the formatted data).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from paystream import credentials
from paystream.env import EnvSettings, SettingsError

# Written by `stack up` next to the data when it formats the storage.
RECORD_FILE = "kafka-brokers"
# One node, or a quorum of voters that survives losing a minority: 3 survive one loss, 5
# two. An even count tolerates no more losses than the odd count below it (two voters
# need both), so it is refused.
COUNTS = (1, 3, 5)
# Three copies, two of which must hold a write before it is acknowledged (acks=all): one
# node may be lost, or restarted, without refusing writes or losing an acknowledged one.
REPLICAS = 3
MIN_INSYNC = 2


@dataclass(frozen=True)
class KafkaNode:
    node_id: int
    client_port: int
    controller_port: int

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"


class KafkaSettings(EnvSettings):
    """Where Kafka is: every paystream process's bootstrap servers, and the local
    cluster's shape (`paystream stack …`, [operations](operations.md#the-local-stack))."""

    doc_section = "Where the services are"

    bootstrap: str | None = Field(
        None, alias="PAYSTREAM_KAFKA_BOOTSTRAP",
        json_schema_extra={"shown": "every local Kafka node: `127.0.0.1:` + each node's "
                                    "client port (below)"},
        description="Kafka bootstrap servers")
    brokers: int | None = Field(
        None, alias="PAYSTREAM_KAFKA_BROKERS",
        json_schema_extra={"shown": "what the state dir's Kafka was formatted with, else "
                                    "`1`"},
        description="Kafka nodes, each a combined broker + controller: `1`, or `3` (or `5`) "
                    "for a replicated cluster, replication factor 3 and "
                    "`min.insync.replicas=2` ([operations](operations.md#a-replicated-"
                    "cluster)); `stack up --brokers N` overrides it. Fixed when the storage "
                    "is first formatted: `stack up` refuses another count on existing data")
    kafka_port: int = Field(9092, alias="PAYSTREAM_KAFKA_PORT", ge=1,
                            description="the first node's client port")
    controller_port: int = Field(9093, alias="PAYSTREAM_CONTROLLER_PORT", ge=1,
                                 description="the first node's KRaft controller port")
    port_step: int = Field(
        10, alias="PAYSTREAM_KAFKA_PORT_STEP", ge=1,
        description="node n listens on the two ports above + (n − 1) × this (9092/9093, "
                    "9102/9103, 9112/9113); client and controller ports must not collide")
    partitions: int = Field(12, alias="PAYSTREAM_TOPIC_PARTITIONS", ge=1,
                            description="partitions of the paystream topics; set it before "
                                        "the first `up`")

    def broker_count(self) -> int:
        """PAYSTREAM_KAFKA_BROKERS (or --brokers), else what the state dir's stack was
        formatted with, else 1."""
        count = self.brokers
        if count is None:
            count = recorded_count() or 1
        if count not in COUNTS:
            raise SettingsError(f"PAYSTREAM_KAFKA_BROKERS (or --brokers) must be one of "
                                f"{', '.join(map(str, COUNTS))}, got {count}")
        return count

    def nodes(self, count: int | None = None) -> tuple[KafkaNode, ...]:
        """The nodes of the local cluster (`count`, default broker_count()), ids 1..N."""
        n = self.broker_count() if count is None else count
        step = self.port_step
        found = tuple(KafkaNode(i + 1, self.kafka_port + i * step,
                                self.controller_port + i * step) for i in range(n))
        ports = [p for node in found for p in (node.client_port, node.controller_port)]
        if len(set(ports)) != len(ports):
            raise SettingsError(
                f"the Kafka nodes' ports collide ({', '.join(map(str, ports))}): set "
                "PAYSTREAM_KAFKA_PORT, PAYSTREAM_CONTROLLER_PORT and PAYSTREAM_KAFKA_PORT_STEP "
                "so that client and controller ports stay apart")
        return found

    def bootstrap_servers(self, count: int | None = None) -> str:
        """PAYSTREAM_KAFKA_BOOTSTRAP, else every local node's client address (a client
        still finds the cluster when the first node is down)."""
        return self.bootstrap or ",".join(node.address for node in self.nodes(count))


def recorded_count() -> int | None:
    """The count `stack up` formatted this state dir's storage for, if it did."""
    try:
        return int((credentials.state_dir() / RECORD_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def record_count(count: int) -> None:
    (credentials.state_dir() / RECORD_FILE).write_text(f"{count}\n")


def broker_count() -> int:
    return KafkaSettings.from_env().broker_count()


def nodes(count: int | None = None) -> tuple[KafkaNode, ...]:
    return KafkaSettings.from_env().nodes(count)


def bootstrap() -> str:
    """Every local node's client address (whatever PAYSTREAM_KAFKA_BOOTSTRAP says)."""
    return ",".join(node.address for node in nodes())


def kafka_bootstrap() -> str:
    """The bootstrap servers every Kafka client of a paystream process uses:
    PAYSTREAM_KAFKA_BOOTSTRAP, else every node of the local cluster."""
    return KafkaSettings.from_env().bootstrap_servers()


def replication(count: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of `count` nodes: three
    copies and two in sync from three nodes on; what fits on fewer."""
    return min(REPLICAS, count), MIN_INSYNC if count >= REPLICAS else 1
