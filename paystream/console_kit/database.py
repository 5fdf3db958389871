"""The console's database: each page's work in ONE transaction of a database thread
(paystream/edge/db_threads.py), as the operator's role. A read is READ ONLY (a page
that only shows cannot change anything by mistake); every transaction has a statement
timeout, so a slow query answers an error page instead of holding a thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import psycopg2

from paystream.console_kit.settings import ConsoleSettings
from paystream.edge.db_threads import DatabaseThreads, WaitedTooLong
from paystream.schema.db import Connection, Cursor, connect

T = TypeVar("T")
THREADS = 4  # a few operators at once; each thread holds one connection


class DatabaseUnavailable(Exception):  # noqa: N818 - a condition, the message says why
    """Postgres did not answer; the page says so (503)."""


class ValueRefused(Exception):  # noqa: N818 - a refusal, the message says why
    """Postgres refused a value a request carried (out of range, not storable): the
    page answers 400. The edge's checks (edge/params.py) should have refused it first;
    this is the backstop, so such a value is never a 500."""


class ConsoleDatabase:
    def __init__(self, settings: ConsoleSettings) -> None:
        self._settings = settings
        self._threads = DatabaseThreads(THREADS, self._connect, name="console-db",
                                        max_wait_s=10.0)

    async def read(self, work: Callable[[Cursor], T]) -> T:
        return await self._run(work, read_only=True)

    async def write(self, work: Callable[[Cursor], T]) -> T:
        return await self._run(work, read_only=False)

    async def _run(self, work: Callable[[Cursor], T], *, read_only: bool) -> T:
        try:
            return await self._threads.run(lambda conn: self._transaction(conn, work,
                                                                          read_only))
        except (psycopg2.OperationalError, psycopg2.InterfaceError, WaitedTooLong) as exc:
            raise DatabaseUnavailable(f"the database did not answer: {type(exc).__name__}"
                                      f" {_first_line(exc)}".rstrip()) from None
        except psycopg2.DataError as exc:
            raise ValueRefused(f"a value the database cannot take: {_first_line(exc)}"
                               ) from None
        except ValueError as exc:  # psycopg2's own refusal to send a NUL character
            if "NUL" not in str(exc):
                raise
            raise ValueRefused(f"a value the database cannot take: {exc}") from None

    def _transaction(self, conn: Connection, work: Callable[[Cursor], T],
                     read_only: bool) -> T:
        with conn, conn.cursor() as cur:  # commit at the end, roll back on a raise
            if read_only:
                cur.execute("SET TRANSACTION READ ONLY")
            cur.execute("SET LOCAL statement_timeout = %s",
                        (self._settings.db_statement_timeout_ms,))
            return work(cur)

    def _connect(self) -> Connection:
        return connect(self._settings.database_url, connect_timeout=5,
                       application_name="paystream-console")

    def close(self) -> None:
        self._threads.close()


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]
