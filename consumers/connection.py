"""The consumer's one Postgres connection, reopened after it is lost.

Its lock and statement timeouts are the role's server-side defaults
(schema.db.ROLE_SETTINGS): they hold through a transaction-pooling PgBouncer, where a
session SET run here would stay behind on one server connection.
"""

from __future__ import annotations

import contextlib

import psycopg2

from paystream.schema.db import Connection, DbRole, connect, database_url


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
