"""Postgres for the API: the two kinds of transaction a request runs in, each handed
whole to one of a few database threads, nothing kept in a session between them.

- `read`: one REPEATABLE READ READ ONLY transaction: every query of the request sees the
  same committed state.
- `write`: one READ COMMITTED transaction, committed when the work returns.

A route is an `async def` that hands its transaction (a function of a cursor) to
paystream/edge/db_threads.py: `db_pool_size` threads, each with its own connection, one hop from
the event loop and back (why not a sync route in Starlette's thread pool or an async
driver: that module says, with the figures).

Round trips: the transaction's opening (`BEGIN ...; SET LOCAL statement_timeout`)
travels in one message with its first statement, and a read of ONE statement
(`one_statement=True`) has no BEGIN or COMMIT at all: `SET TRANSACTION ISOLATION LEVEL
REPEATABLE READ READ ONLY; SET LOCAL statement_timeout = N; <statement>` in one
simple-protocol message runs as one implicit transaction that Postgres commits when the
message ends ("Multiple Statements in a Simple Query" in its protocol docs). The
statement timeout is SET LOCAL, scoped to the transaction, so the API works behind a
transaction-pooling PgBouncer (no session SET, no server-side prepared statements,
which psycopg2 never makes, no advisory locks).

A connection that failed is closed, not used again; the failure is answered 503 with
Retry-After (nothing was written, or the write is idempotent), as is a request that
waited db_wait_s for a database thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import structlog

from paystream.api.settings import ApiSettings
from paystream.edge.db_threads import DatabaseThreads, WaitedTooLong
from paystream.edge.errors import DatabaseUnavailableError, NotFoundError
from paystream.schema.db import Connection, Cursor, connect

T = TypeVar("T")
# The database cannot answer now: answer 503 (a timeout is 57014, an OperationalError).
TRANSIENT_ERRORS = (psycopg2.OperationalError, psycopg2.InterfaceError, WaitedTooLong)
IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE
log = structlog.get_logger("paystream.api.database")


class TenancyNotEnforced(psycopg2.OperationalError):
    """The API's role would see every merchant's rows: answered 503, never served."""


class OpeningCursor(psycopg2.extensions.cursor):
    """A cursor that sends the transaction's opening with its first statement, and in
    a one-statement read refuses a second (it would run outside the snapshot)."""

    opening = ""
    pending = False     # the opening is not sent yet
    only_one = False    # one-statement read: the implicit transaction ends with it

    def execute(self, query: Any, vars: Any = None) -> None:
        if self.pending:
            self.pending = False
            opening = self.opening
            query = (opening.encode("ascii") if isinstance(query, bytes) else opening) + query
        elif self.only_one:
            raise RuntimeError("a one-statement read sent a second statement")
        super().execute(query, vars)


class Database:
    def __init__(self, settings: ApiSettings) -> None:
        self._settings = settings
        timeout = settings.db_statement_timeout_ms
        self._openings = {
            "read": f"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
                    f" SET LOCAL statement_timeout = {timeout}; ",
            "read_one": f"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY;"
                        f" SET LOCAL statement_timeout = {timeout}; ",
            "write": f"BEGIN; SET LOCAL statement_timeout = {timeout}; ",
        }
        # At most db_pool_size connections, opened on demand (the API starts without
        # Postgres); work that waits db_wait_s for a thread is refused (a slow database
        # must not queue work unboundedly).
        self._threads = DatabaseThreads(settings.db_pool_size, self.connect,
                                        name="api-db", max_wait_s=settings.db_wait_s)

    async def read(self, work: Callable[[Cursor], T], *, one_statement: bool = False) -> T:
        """`work(cursor)` in one REPEATABLE READ READ ONLY transaction, in a database
        thread. `one_statement`: work runs exactly one statement (no BEGIN / COMMIT
        round trips; a second statement raises)."""
        return await self._run(work, "read_one" if one_statement else "read")

    async def write(self, work: Callable[[Cursor], T]) -> T:
        """`work(cursor)` in one READ COMMITTED transaction, committed when it returns,
        rolled back if it raises."""
        return await self._run(work, "write")

    async def _run(self, work: Callable[[Cursor], T], kind: str) -> T:
        try:
            return await self._threads.run(lambda conn: self._transaction(conn, work, kind))
        except psycopg2.errors.InsufficientPrivilege as exc:
            # A write the tenancy policies refused (a row of another merchant's user):
            # what a missing row answers, so the refusal tells nothing more.
            if "row-level security" not in str(exc):
                raise
            raise NotFoundError("no such resource", code="not_found") from None
        except TRANSIENT_ERRORS as exc:
            reason = (str(exc) if isinstance(exc, WaitedTooLong)
                      else f"the database did not answer: {type(exc).__name__}")
            raise DatabaseUnavailableError(
                reason, retry_after=self._settings.retry_after_s) from None

    def _transaction(self, conn: Connection, work: Callable[[Cursor], T], kind: str) -> T:
        """In a database thread: `work` in one transaction of `kind` on `conn`."""
        with conn.cursor(cursor_factory=OpeningCursor) as cur:
            assert isinstance(cur, OpeningCursor)
            cur.opening, cur.pending = self._openings[kind], True
            cur.only_one = kind == "read_one"
            try:
                result = work(cur)
            except BaseException:
                # A refusal (or a failed statement) inside the transaction: end it. A
                # broken connection cannot (the server ends it; db_threads closes ours).
                if not conn.closed and conn.get_transaction_status() != IDLE:
                    with contextlib.suppress(psycopg2.Error):
                        cur.only_one = False
                        cur.execute("ROLLBACK")
                raise
            if kind != "read_one" and not cur.pending:
                cur.execute("COMMIT")
            return result

    def connect(self) -> Connection:
        """A connection as the API's role, refused if that role is not held to the
        merchants' row-level security (a superuser, the tables' owner or BYPASSRLS
        would let every key see every merchant: migration 0033)."""
        s = self._settings
        conn = connect(s.database_url, connect_timeout=s.db_connect_timeout_s,
                       application_name="paystream-api")
        conn.autocommit = True  # each transaction is opened by statement
        with conn.cursor() as cur:
            cur.execute("SELECT row_security_active('users'), current_user")
            enforced, role = cur.fetchone() or (False, "?")
        if not enforced:
            conn.close()
            log.error("tenancy_not_enforced", role=role)
            raise TenancyNotEnforced(
                f"the API's database role {role!r} bypasses row-level security; connect "
                "as paystream_api (docs/api.md#merchants)")
        return conn

    def close(self) -> None:
        """Let the work handed over finish, then close every connection."""
        self._threads.close()
