"""The local Kafka cluster's shape: how many KRaft nodes, where each listens, and the
replication its topics get. The one reader of the broker count and the broker ports.

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

from paystream import credentials
from paystream.env import SettingsError, env_int

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


def recorded_count() -> int | None:
    """The count `stack up` formatted this state dir's storage for, if it did."""
    try:
        return int((credentials.state_dir() / RECORD_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def record_count(count: int) -> None:
    (credentials.state_dir() / RECORD_FILE).write_text(f"{count}\n")


def broker_count() -> int:
    """PAYSTREAM_KAFKA_BROKERS, else what the state dir's stack was formatted with, else 1."""
    count = env_int("PAYSTREAM_KAFKA_BROKERS", None)
    if count is None:
        count = recorded_count() or 1
    if count not in COUNTS:
        raise SettingsError(f"PAYSTREAM_KAFKA_BROKERS (or --brokers) must be one of "
                            f"{', '.join(map(str, COUNTS))}, got {count}")
    return count


def kafka_port() -> int:
    """The first node's client port (PAYSTREAM_KAFKA_PORT)."""
    return env_int("PAYSTREAM_KAFKA_PORT", 9092)


def controller_port() -> int:
    """The first node's controller port (PAYSTREAM_CONTROLLER_PORT)."""
    return env_int("PAYSTREAM_CONTROLLER_PORT", 9093)


def port_step() -> int:
    return env_int("PAYSTREAM_KAFKA_PORT_STEP", 10)


def nodes(count: int | None = None) -> tuple[KafkaNode, ...]:
    """The nodes of the local cluster (`count`, default broker_count()), node ids 1..N."""
    n = broker_count() if count is None else count
    step = port_step()
    found = tuple(KafkaNode(i + 1, kafka_port() + i * step, controller_port() + i * step)
                  for i in range(n))
    ports = [p for node in found for p in (node.client_port, node.controller_port)]
    if len(set(ports)) != len(ports):
        raise SettingsError(
            f"the Kafka nodes' ports collide ({', '.join(map(str, ports))}): set "
            "PAYSTREAM_KAFKA_PORT, PAYSTREAM_CONTROLLER_PORT and PAYSTREAM_KAFKA_PORT_STEP "
            "so that client and controller ports stay apart")
    return found


def bootstrap() -> str:
    """Every local node's client address: a client still finds the cluster when the
    first node is down."""
    return ",".join(node.address for node in nodes())


def replication(count: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of `count` nodes: three
    copies and two in sync from three nodes on; what fits on fewer."""
    return min(REPLICAS, count), MIN_INSYNC if count >= REPLICAS else 1
