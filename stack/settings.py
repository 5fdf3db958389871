"""Settings of the local stack, from environment variables with loopback defaults.

Every port, folder and heap size can be changed, so two stacks (say, a developer's and a
test run's) can live side by side on one machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pydantic import Field

from paystream import credentials
from paystream.connectors.endpoint import ConnectSettings
from paystream.env import EnvSettings
from paystream.kafka_nodes import KafkaNode, KafkaSettings
from paystream.schema import db

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def _kafka_heap(fields: dict[str, Any]) -> str:
    # Per node: three brokers and Connect must fit beside the rest on a 2-core, shared
    # machine (docs/operations.md#a-replicated-cluster).
    return "512m" if len(fields.get("kafka_nodes", ())) == 1 else "384m"


class StackSettings(EnvSettings):
    """Read by `paystream stack …` ([operations](operations.md#the-local-stack)): the
    JVM heaps. The stack's addresses, folders and topics come from the declarations they
    share with every process (state folder, Postgres, Kafka, Connect)."""

    doc_section = "Local stack"

    # Not variables of their own: from StateSettings, DatabaseSettings, KafkaSettings and
    # ConnectSettings (from_env).
    state_dir: Path
    pg_host: str
    pg_port: int
    pg_db: str
    # PAYSTREAM_STANDBY / PAYSTREAM_PG_STANDBY_PORT (DatabaseSettings): a second node.
    standby: bool = False
    pg_standby_port: int = 5438
    kafka_nodes: tuple[KafkaNode, ...]
    kafka_bootstrap: str
    partitions: int
    connect_port: int
    connector_name: str
    connect_url: str
    kafka_heap: str = Field(default_factory=_kafka_heap, alias="PAYSTREAM_KAFKA_HEAP",
                            json_schema_extra={"shown": "`512m` (one node), `384m` (each "
                                                        "node of a cluster)"},
                            description="each Kafka node's JVM heap")
    connect_heap: str = Field("768m", alias="PAYSTREAM_CONNECT_HEAP",
                              description="Connect's JVM heap")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 overrides: Mapping[str, object] | None = None, *,
                 brokers: int | None = None) -> Self:
        """`brokers`: `stack up --brokers`, over PAYSTREAM_KAFKA_BROKERS."""
        pg = db.PostgresAddress.direct_from_env(env)
        dbs = db.DatabaseSettings.from_env(env)
        kafka = KafkaSettings.from_env(env, {"brokers": brokers} if brokers else None)
        nodes = kafka.nodes()
        connect = ConnectSettings.from_env(env)
        return super().from_env(env, {
            "state_dir": credentials.state_dir(),
            "pg_host": pg.host, "pg_port": pg.port, "pg_db": pg.db,
            # Remembered, as the broker count is: a stack whose node1 was handed to
            # pg_auto_failover (stack/standby.py) keeps its standby without the variable.
            "standby": dbs.standby or (credentials.state_dir() / "pgaf" / "config").exists(),
            "pg_standby_port": dbs.pg_standby_port,
            "kafka_nodes": nodes, "kafka_bootstrap": kafka.bootstrap_servers(len(nodes)),
            "partitions": kafka.partitions,
            "connect_port": connect.port, "connector_name": connect.connector_name,
            "connect_url": connect.url or f"http://127.0.0.1:{connect.port}",
            **(overrides or {})})

    @property
    def brokers(self) -> int:
        return len(self.kafka_nodes)

    @property
    def kafka_port(self) -> int:
        """The first node's client port (the only one of a one-node stack)."""
        return self.kafka_nodes[0].client_port

    @property
    def controller_port(self) -> int:
        return self.kafka_nodes[0].controller_port

    # Folders under the state dir; all git-ignored, all survive `down` + `up`.
    @property
    def jars_dir(self) -> Path:
        return self.state_dir / "jars"

    @property
    def pg_data(self) -> Path:
        return self.state_dir / "pgdata"

    @property
    def kafka_data(self) -> Path:
        """A one-node stack's Kafka data (a cluster's nodes: stack.kafka.data_dir)."""
        return self.state_dir / "kafka-data"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def database_url(self) -> str:
        """The owner's DSN (migrations, status): no password in it (the passfile)."""
        return self.role_url("owner")

    def role_url(self, role: db.DbRole) -> str:
        """`role`'s DSN on this stack's Postgres (or its explicit variable)."""
        return db.database_url(role, address=db.PostgresAddress(
            self.pg_host, self.pg_port, self.pg_db,
            self.pg_standby_port if self.standby else None))

    @property
    def cdc_node_file(self) -> Path:
        """With a standby: the port of the node Debezium reads (its slot's), written by
        `stack up` and by the failover follower when it re-points the connector."""
        return self.run_dir / "cdc-node-port"

    @property
    def cdc_port(self) -> int:
        """The port Debezium connects to: the node named in cdc_node_file, else pg_port."""
        try:
            return int(self.cdc_node_file.read_text().strip()) if self.standby else self.pg_port
        except (FileNotFoundError, ValueError):
            return self.pg_port

    def service_env(self) -> dict[str, str]:
        """Variables that point paystream processes at this stack. No DSN and no
        password: each process builds its own role's DSN (schema.db.database_url) and
        finds the password in the stack's passfile under PAYSTREAM_STATE_DIR."""
        return {
            "PAYSTREAM_STATE_DIR": str(self.state_dir),
            "PAYSTREAM_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "PAYSTREAM_PG_HOST": self.pg_host,
            "PAYSTREAM_PG_PORT": str(self.pg_port),
            "PAYSTREAM_PG_DB": self.pg_db,
            **({"PAYSTREAM_STANDBY": "1", "PAYSTREAM_PG_STANDBY_PORT": str(self.pg_standby_port)}
               if self.standby else {}),
        }

    def connect_env(self) -> dict[str, str]:
        """Kafka Connect's variables: what the Debezium connector reads
        (connectors/config/outbox-connector.json, EnvVarConfigProvider), logging in as
        the CDC role (REPLICATION, the outbox, its heartbeat; nothing else)."""
        return {
            "PAYSTREAM_PG_HOST": self.pg_host,
            "PAYSTREAM_PG_PORT": str(self.cdc_port),
            "PAYSTREAM_PG_USER": db.ROLE_NAMES["cdc"],
            "PAYSTREAM_PG_PASSWORD": credentials.read_secret(db.secret_name("cdc")),
            "PAYSTREAM_PG_DB": self.pg_db,
        }
