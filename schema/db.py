"""Where the shared services are, and a Postgres connection factory.

Addresses come from environment variables with the local stack's loopback defaults
(the same variables `paystream stack up` uses), so every process finds the same stack.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psycopg2
import psycopg2.extensions

from paystream.env import env_int, env_str

# The one spelling of a database handle for every signature in paystream.
Connection = psycopg2.extensions.connection
Cursor = psycopg2.extensions.cursor


@dataclass(frozen=True)
class PostgresAddress:
    """The local stack's Postgres, from the PAYSTREAM_PG_* variables: what `paystream
    stack up` starts and what every process connects to unless PAYSTREAM_DATABASE_URL
    says otherwise. The one reader of these variables."""

    host: str
    port: int
    user: str
    password: str
    db: str

    @classmethod
    def from_env(cls) -> PostgresAddress:
        return cls(host=env_str("PAYSTREAM_PG_HOST", "127.0.0.1"),
                   port=env_int("PAYSTREAM_PG_PORT", 5433),
                   user=env_str("PAYSTREAM_PG_USER", "paystream"),
                   password=env_str("PAYSTREAM_PG_PASSWORD", "paystream"),
                   db=env_str("PAYSTREAM_PG_DB", "paystream"))

    def dsn(self) -> str:
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{self.db}"


def database_url() -> str:
    """PAYSTREAM_DATABASE_URL, else a DSN built from the PAYSTREAM_PG_* variables."""
    explicit = os.environ.get("PAYSTREAM_DATABASE_URL")
    return explicit if explicit else PostgresAddress.from_env().dsn()


def kafka_port() -> int:
    """The local broker's port (PAYSTREAM_KAFKA_PORT); the one reader of it."""
    return env_int("PAYSTREAM_KAFKA_PORT", 9092)


def kafka_bootstrap() -> str:
    """PAYSTREAM_KAFKA_BOOTSTRAP, else the local broker on PAYSTREAM_KAFKA_PORT."""
    return env_str("PAYSTREAM_KAFKA_BOOTSTRAP", f"127.0.0.1:{kafka_port()}")


def connect(dsn: str | None = None, *, connect_timeout: int = 5,
            application_name: str = "paystream") -> Connection:
    """Open a connection with a bounded connect timeout (a dead DB must fail fast)."""
    return psycopg2.connect(
        dsn or database_url(),
        connect_timeout=connect_timeout,
        application_name=application_name,
    )
