"""Postgres for the API: a bounded pool of connections and the two kinds of transaction
a request runs in, nothing kept in a session between them.

- `read`: one REPEATABLE READ READ ONLY transaction (schema.db.snapshot): every query
  of the request sees the same committed state.
- `write`: one READ COMMITTED transaction, committed when the block ends.

Both begin with `SET LOCAL statement_timeout`: a setting scoped to the transaction, so
the API works behind a transaction-pooling PgBouncer (no session SET, no server-side
prepared statements, which psycopg2 never makes, no advisory locks).

psycopg2 blocks: the routes that use this run in the server's thread pool, never on the
event loop. A connection that failed is closed, not pooled again; the failure is
answered 503 with Retry-After (nothing was written, or the write is idempotent).
"""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Iterator

import psycopg2
import psycopg2.extensions

from paystream.api.errors import DatabaseUnavailableError
from paystream.api.settings import ApiSettings
from paystream.schema.db import Connection, Cursor, connect, snapshot

# The database cannot answer now: answer 503 (a timeout is 57014, an OperationalError).
TRANSIENT_ERRORS = (psycopg2.OperationalError, psycopg2.InterfaceError)


class Database:
    def __init__(self, settings: ApiSettings) -> None:
        self._settings = settings
        # Slots, not connections: a slot holds an idle connection or None (open one on
        # demand), so the pool never opens more than db_pool_size and starts without
        # Postgres.
        self._slots: queue.LifoQueue[Connection | None] = queue.LifoQueue()
        for _ in range(settings.db_pool_size):
            self._slots.put(None)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Connection]:
        s = self._settings
        try:
            conn = self._slots.get(timeout=s.db_wait_s)
        except queue.Empty:
            raise DatabaseUnavailableError("every database connection is busy",
                                           retry_after=s.retry_after_s) from None
        healthy = False
        try:
            if conn is None or conn.closed:
                conn = connect(s.database_url, connect_timeout=s.db_connect_timeout_s,
                               application_name="paystream-api")
                conn.autocommit = True  # each transaction is opened by statement
            yield conn
            healthy = True
        except TRANSIENT_ERRORS as exc:
            raise DatabaseUnavailableError(
                f"the database did not answer: {type(exc).__name__}",
                retry_after=s.retry_after_s) from None
        finally:
            # A refusal raised inside the block leaves a sound connection; anything else
            # may have left it mid-transaction or broken: start afresh.
            if not healthy and conn is not None and (
                    conn.closed or conn.get_transaction_status()
                    != psycopg2.extensions.TRANSACTION_STATUS_IDLE):
                with contextlib.suppress(psycopg2.Error):
                    conn.close()
                conn = None
            self._slots.put(conn)

    @contextlib.contextmanager
    def read(self) -> Iterator[Cursor]:
        """A cursor in one REPEATABLE READ READ ONLY transaction."""
        with self._connection() as conn, snapshot(
                conn, statement_timeout_ms=self._settings.db_statement_timeout_ms) as cur:
            yield cur

    @contextlib.contextmanager
    def write(self) -> Iterator[Cursor]:
        """A cursor in one READ COMMITTED transaction: committed at the end of the block,
        rolled back if it raises."""
        with self._connection() as conn, conn.cursor() as cur:
            cur.execute("BEGIN; SET LOCAL statement_timeout = %s",
                        (self._settings.db_statement_timeout_ms,))
            try:
                yield cur
            except BaseException:
                with contextlib.suppress(psycopg2.Error):
                    if not conn.closed:
                        cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")

    def close(self) -> None:
        while True:
            try:
                conn = self._slots.get_nowait()
            except queue.Empty:
                return
            if conn is not None:
                conn.close()
