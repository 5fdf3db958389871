"""Where the shared services are, and a Postgres connection factory.

Addresses come from environment variables with the local stack's loopback defaults
(the same variables `paystream stack up` uses), so every process finds the same stack.
"""

from __future__ import annotations

import os

import psycopg2
import psycopg2.extensions

# The one spelling of a database handle for every signature in paystream.
Connection = psycopg2.extensions.connection
Cursor = psycopg2.extensions.cursor


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


def database_url() -> str:
    """PAYSTREAM_DATABASE_URL, else a DSN built from the PAYSTREAM_PG_* variables."""
    explicit = os.environ.get("PAYSTREAM_DATABASE_URL")
    if explicit:
        return explicit
    return "postgresql://{user}:{password}@{host}:{port}/{db}".format(
        user=_env("PAYSTREAM_PG_USER", "paystream"),
        password=_env("PAYSTREAM_PG_PASSWORD", "paystream"),
        host=_env("PAYSTREAM_PG_HOST", "127.0.0.1"),
        port=_env("PAYSTREAM_PG_PORT", "5433"),
        db=_env("PAYSTREAM_PG_DB", "paystream"),
    )


def kafka_bootstrap() -> str:
    """PAYSTREAM_KAFKA_BOOTSTRAP, else the local broker on PAYSTREAM_KAFKA_PORT."""
    explicit = os.environ.get("PAYSTREAM_KAFKA_BOOTSTRAP")
    if explicit:
        return explicit
    return "127.0.0.1:" + _env("PAYSTREAM_KAFKA_PORT", "9092")


def connect(dsn: str | None = None, *, connect_timeout: int = 5,
            application_name: str = "paystream") -> Connection:
    """Open a connection with a bounded connect timeout (a dead DB must fail fast)."""
    return psycopg2.connect(
        dsn or database_url(),
        connect_timeout=connect_timeout,
        application_name=application_name,
    )
