"""Settings of the local stack, from environment variables with loopback defaults.

Every port, folder and heap size can be changed, so two stacks (say, a developer's and a
test run's) can live side by side on one machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paystream import credentials, kafka_nodes
from paystream.connectors import endpoint
from paystream.env import env_int, env_str
from paystream.kafka_nodes import KafkaNode
from paystream.schema import db

PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class StackSettings:
    state_dir: Path
    pg_host: str
    pg_port: int
    pg_db: str
    kafka_nodes: tuple[KafkaNode, ...]
    connect_port: int
    kafka_heap: str
    connect_heap: str
    partitions: int
    connector_name: str

    @classmethod
    def from_env(cls) -> StackSettings:
        pg = db.PostgresAddress.direct_from_env()
        return cls(
            state_dir=credentials.state_dir(),
            pg_host=pg.host,
            pg_port=pg.port,
            pg_db=pg.db,
            kafka_nodes=(nodes := kafka_nodes.nodes()),
            connect_port=endpoint.connect_port(),
            # Per node: three brokers and Connect must fit beside the rest on a 2-core,
            # shared machine (docs/operations.md#a-replicated-cluster).
            kafka_heap=env_str("PAYSTREAM_KAFKA_HEAP", "512m" if len(nodes) == 1 else "384m"),
            connect_heap=env_str("PAYSTREAM_CONNECT_HEAP", "768m"),
            partitions=env_int("PAYSTREAM_TOPIC_PARTITIONS", 12),
            connector_name=endpoint.connector_name(),
        )

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

    # Addresses: the local processes, unless overridden (docker-compose's setup service
    # points these at the other containers).
    @property
    def kafka_bootstrap(self) -> str:
        return db.kafka_bootstrap()

    @property
    def connect_url(self) -> str:
        return endpoint.connect_url(self.connect_port)

    @property
    def database_url(self) -> str:
        """The owner's DSN (migrations, status): no password in it (the passfile)."""
        return self.role_url("owner")

    def role_url(self, role: db.DbRole) -> str:
        """`role`'s DSN on this stack's Postgres (or its explicit variable)."""
        return db.database_url(role, address=db.PostgresAddress(self.pg_host, self.pg_port,
                                                                 self.pg_db))

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
        }

    def connect_env(self) -> dict[str, str]:
        """Kafka Connect's variables: what the Debezium connector reads
        (connectors/config/outbox-connector.json, EnvVarConfigProvider), logging in as
        the CDC role (REPLICATION, the outbox, its heartbeat; nothing else)."""
        return {
            "PAYSTREAM_PG_HOST": self.pg_host,
            "PAYSTREAM_PG_PORT": str(self.pg_port),
            "PAYSTREAM_PG_USER": db.ROLE_NAMES["cdc"],
            "PAYSTREAM_PG_PASSWORD": credentials.read_secret(db.secret_name("cdc")),
            "PAYSTREAM_PG_DB": self.pg_db,
        }
