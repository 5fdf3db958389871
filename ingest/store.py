"""Postgres access for the ingest: a bounded connection pool and one transaction runner.

psycopg2 blocks, so the app calls `run` in worker threads (never on the event loop), at
most `pool_size` at a time. Every failure that means "the database cannot answer now"
(refused connection, dropped connection, statement or lock timeout, deadlock) becomes
DatabaseUnavailableError, which the app answers 503 + Retry-After so the provider
retries: nothing the provider sent is lost, because nothing was acknowledged.

A failed attempt drops every idle pooled connection and is retried once on a fresh one:
after a Postgres restart all pooled connections are dead, and the first request after
the restart must not pay for that. Retrying is
safe because every write is idempotent by event id (a COMMIT whose answer was lost
comes back as a duplicate).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable
from typing import TypeVar

import psycopg2
import psycopg2.extensions
import structlog

from ingest.errors import DatabaseUnavailableError, PayloadError

T = TypeVar("T")
log = structlog.get_logger("ingest.store")

# Errors that say the database (not the request) is the problem: answer 503.
TRANSIENT_ERRORS = (psycopg2.OperationalError, psycopg2.InterfaceError)
# A constraint the validation should have caught: the request's fault, answer 400.
REJECTED_BY_DATABASE = (psycopg2.IntegrityError, psycopg2.DataError)


class ConnectionPool:
    """Idle connections kept for reuse, opened on demand (none at start).

    Concurrency is bounded by the caller (the app's CapacityLimiter, one token per
    connection), so the pool itself never blocks. psycopg2's own pools close every
    connection returned beyond `minconn`, and open `minconn` connections at creation
    (which fails while Postgres is down); neither suits a service that must start, and
    answer 503, without its database.
    """

    def __init__(self, dsn: str, **connect_kwargs: object) -> None:
        self._dsn = dsn
        self._connect_kwargs = connect_kwargs
        self._idle: deque[psycopg2.extensions.connection] = deque()
        self._lock = threading.Lock()

    def get(self) -> psycopg2.extensions.connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()  # the most recently used: warm, least likely stale
        return psycopg2.connect(self._dsn, **self._connect_kwargs)

    def put(self, conn: psycopg2.extensions.connection, *, healthy: bool) -> None:
        if healthy and not conn.closed:
            with self._lock:
                self._idle.append(conn)
            return
        _close(conn)

    def discard_idle(self) -> None:
        """Close every idle connection (after a failure they are likely all dead)."""
        with self._lock:
            idle, self._idle = list(self._idle), deque()
        for conn in idle:
            _close(conn)


class EventStore:
    def __init__(self, dsn: str, *, pool_size: int, connect_timeout_s: int,
                 statement_timeout_ms: int, retry_after_s: int) -> None:
        self._pool_size = pool_size
        self._retry_after_s = retry_after_s
        self._pool = ConnectionPool(
            dsn,
            connect_timeout=connect_timeout_s,
            application_name="paystream-ingest",
            # Bounded waits: a stuck statement must not hold the provider past its timeout.
            options=f"-c statement_timeout={statement_timeout_ms}"
                    f" -c lock_timeout={statement_timeout_ms}"
                    f" -c idle_in_transaction_session_timeout={statement_timeout_ms * 5}",
            keepalives=1, keepalives_idle=30,
        )

    @property
    def pool_size(self) -> int:
        """How many transactions may run at once (the caller enforces it)."""
        return self._pool_size

    def run(self, work: Callable[[psycopg2.extensions.cursor], T]) -> T:
        """Run `work` in one transaction and commit; roll back if it raises."""
        for attempt in (1, 2):
            try:
                return self._attempt(work)
            except TRANSIENT_ERRORS as exc:
                self._pool.discard_idle()
                log.warning("database attempt failed", attempt=attempt,
                            error=type(exc).__name__, detail=str(exc).strip()[:200])
                if attempt == 2:
                    raise DatabaseUnavailableError(
                        "the database is unavailable; retry later",
                        retry_after=self._retry_after_s) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        self._pool.discard_idle()

    def _attempt(self, work: Callable[[psycopg2.extensions.cursor], T]) -> T:
        conn = self._pool.get()
        healthy = True
        try:
            with conn.cursor() as cur:
                result = work(cur)
            conn.commit()
            return result
        except TRANSIENT_ERRORS:
            healthy = False
            raise
        except REJECTED_BY_DATABASE as exc:
            healthy = _rollback(conn)
            raise PayloadError(f"rejected by a database constraint: "
                               f"{str(exc).splitlines()[0][:200]}",
                               code="constraint_violation") from None
        except BaseException:
            healthy = _rollback(conn)
            raise
        finally:
            # A broken connection is closed, never handed to the next request.
            self._pool.put(conn, healthy=healthy)


def _rollback(conn: psycopg2.extensions.connection) -> bool:
    """Roll back; return False if the connection is unusable afterwards."""
    try:
        conn.rollback()
    except TRANSIENT_ERRORS:
        return False
    return True


def _close(conn: psycopg2.extensions.connection) -> None:
    with contextlib.suppress(psycopg2.Error):  # closing a dead connection may complain
        conn.close()
