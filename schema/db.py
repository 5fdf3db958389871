"""Where the shared services are, and a Postgres connection factory.

Addresses come from environment variables with the local stack's loopback defaults
(the same variables `paystream stack up` uses), so every process finds the same stack.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.extensions

from paystream.env import env_int, env_str

# The one spelling of a database handle for every signature in paystream.
Connection = psycopg2.extensions.connection
Cursor = psycopg2.extensions.cursor


def one_row(cur: Cursor) -> tuple[Any, ...]:
    """The row a query that always answers one (an aggregate without GROUP BY, `SELECT
    now()`) just answered."""
    row = cur.fetchone()
    assert row is not None, "a query that always answers one row answered none"
    return row


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


@contextlib.contextmanager
def snapshot(conn: Connection) -> Iterator[Cursor]:
    """A cursor inside one REPEATABLE READ, READ ONLY transaction: every read through it
    sees the same committed state.

    The transaction is opened by statement (`BEGIN ISOLATION LEVEL REPEATABLE READ READ
    ONLY`) on an autocommit connection and closed with COMMIT: a session setting would
    not survive a transaction-pooling PgBouncer (the next statement may run on another
    server connection); one explicit transaction does. Works on a consumer's own
    connection too (autocommit off) provided no transaction is open: autocommit is
    switched on for the duration so psycopg2 does not open its own (READ COMMITTED)
    transaction before our BEGIN.
    """
    if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        raise RuntimeError("a snapshot needs a connection with no open transaction")
    previous = conn.autocommit
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                yield cur
            except BaseException:
                # A broken connection cannot roll back; the server ends its transaction.
                with contextlib.suppress(psycopg2.Error):
                    if not conn.closed:
                        cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")
    finally:
        if not conn.closed:
            conn.autocommit = previous
