"""The consumer's one Postgres connection, reopened after it is lost.

Timeouts turn a stuck database into an error the retry loop can see: a lock wait or a
statement that hangs would otherwise hold the batch past max.poll.interval.ms.
"""

from __future__ import annotations

import contextlib

import psycopg2

from paystream.schema.db import Connection, DbRole, connect, database_url

LOCK_TIMEOUT_MS = 10_000  # 55P03 after this: transient, the batch is retried
STATEMENT_TIMEOUT_MS = 30_000  # 57014 after this: transient, the batch is retried


class Database:
    def __init__(self, dsn: str | None = None,
                 application_name: str = "paystream-consumer", *,
                 role: DbRole = "ledger") -> None:
        """`dsn`, else `role`'s (the consumer group's: `ledger` or `mirror`)."""
        self._dsn = dsn or database_url(role)
        self._application_name = application_name
        self._conn: Connection | None = None

    def connection(self) -> Connection:
        """The open connection, reconnecting if the previous one broke."""
        if self._conn is not None and self._conn.closed:
            self._conn = None
        if self._conn is None:
            conn = connect(self._dsn, application_name=self._application_name,
                           connect_timeout=5)
            conn.autocommit = False
            with conn.cursor() as cur:
                cur.execute("SET lock_timeout = %s", (LOCK_TIMEOUT_MS,))
                cur.execute("SET statement_timeout = %s", (STATEMENT_TIMEOUT_MS,))
            conn.commit()
            self._conn = conn
        return self._conn

    def rollback_quietly(self) -> None:
        """Roll back the open transaction; a broken connection is dropped instead."""
        if self._conn is None:
            return
        try:
            self._conn.rollback()
        except psycopg2.Error:
            self.close()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg2.Error):
                self._conn.close()
            self._conn = None
