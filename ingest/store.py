"""Postgres access for the ingest: a connection pool and the group transaction.

`commit_group` runs several deliveries in ONE transaction, each inside its own SAVEPOINT,
and commits once (one WAL flush for the whole group; see ingest/writer.py for who calls
it and when the requests are answered). A delivery that fails on its own (409 conflict,
400 constraint, a bug: 500) is rolled back to its savepoint and the others carry on.

Every failure that means "the database cannot answer now" (refused or dropped
connection, statement or lock timeout, deadlock) fails the whole group: it is retried
once on a fresh connection, and if that fails too, raised as DatabaseUnavailableError,
which the app answers 503 + Retry-After for every delivery of the group. Nothing was
acknowledged, so nothing the provider sent is lost. The retry exists because after a
Postgres restart every pooled connection is dead, and the first group after the restart
must not pay for that. Retrying is safe because every write is idempotent by event id
(a COMMIT whose answer was lost comes back as duplicates).

psycopg2 blocks, so this runs in the writer threads, never on the event loop.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import psycopg2
import structlog

from paystream.ingest.errors import DatabaseUnavailableError, IngestError, PayloadError
from paystream.ingest.recording import DeliveryWrite
from paystream.schema.db import Connection
from paystream.schema.db import Cursor as Cursor  # re-exported: ingest.writer names it here

log = structlog.get_logger("paystream.ingest.store")
# What runs in one savepoint: a delivery (ingest.recording.DeliveryWrite, callable), or
# any other work on the cursor (the readiness probe's SELECT 1).
Work = Callable[[Cursor], Any]

# Errors that say the database (not the request) is the problem: answer 503.
TRANSIENT_ERRORS = (psycopg2.OperationalError, psycopg2.InterfaceError)
# A constraint the validation should have caught: the request's fault, answer 400.
REJECTED_BY_DATABASE = (psycopg2.IntegrityError, psycopg2.DataError)

# One savepoint name, re-used: RELEASE + SAVEPOINT in one round trip between
# deliveries keeps the transaction one subtransaction deep (a deep stack of open
# subtransactions overflows Postgres' per-backend subxid cache and slows every reader).
# BEGIN is sent by us, with the first savepoint (bounded_begin; connections are in
# autocommit mode): every round trip is also a GIL hand-over between a writer thread
# and the event loop.
NEXT_SAVEPOINT = "RELEASE SAVEPOINT delivery; SAVEPOINT delivery"
UNDO_DELIVERY = "ROLLBACK TO SAVEPOINT delivery"


class ConnectionPool:
    """Idle connections kept for reuse, opened on demand (none at start).

    Concurrency is bounded by the caller (one writer thread per connection), so the
    pool itself never blocks. psycopg2's own pools close every connection returned
    beyond `minconn`, and open `minconn` connections at creation (which fails while
    Postgres is down); neither suits a service that must start, and answer 503,
    without its database.
    """

    def __init__(self, dsn: str, **connect_kwargs: Any) -> None:
        self._dsn = dsn
        self._connect_kwargs = connect_kwargs
        self._idle: deque[Connection] = deque()
        self._lock = threading.Lock()

    def get(self) -> Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()  # the most recently used: warm, least likely stale
        conn: Connection = psycopg2.connect(self._dsn, **self._connect_kwargs)
        conn.autocommit = True  # EventStore sends BEGIN and COMMIT itself
        return conn

    def put(self, conn: Connection, *, healthy: bool) -> None:
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


def bounded_begin(statement_timeout_ms: int) -> str:
    """BEGIN, the group's bounded waits, the first savepoint: one round trip. A stuck
    statement must not hold the provider past its timeout. SET LOCAL, not a session
    setting or libpq `options`: it ends with the transaction, so it holds through a
    transaction-pooling PgBouncer (which refuses `options`) and never stays behind on a
    pooled server connection."""
    ms = int(statement_timeout_ms)
    return (f"BEGIN; SET LOCAL statement_timeout = {ms}; SET LOCAL lock_timeout = {ms};"
            f" SET LOCAL idle_in_transaction_session_timeout = {ms * 5}; SAVEPOINT delivery")


class EventStore:
    def __init__(self, dsn: str, *, connect_timeout_s: int, statement_timeout_ms: int,
                 retry_after_s: int) -> None:
        self._retry_after_s = retry_after_s
        self._begin = bounded_begin(statement_timeout_ms)
        self._pool = ConnectionPool(
            dsn,
            connect_timeout=connect_timeout_s,
            application_name="paystream-ingest",
            keepalives=1, keepalives_idle=30,
        )

    def commit_group(self, works: Sequence[Work]) -> list[Any]:
        """Run each work in its own savepoint of one transaction, then COMMIT.

        Returns one entry per work, in order: its result, or the exception that rolled
        it back alone (an IngestError, or any other Exception: a bug, answered 500).
        Raises DatabaseUnavailableError when the group could not be committed: then
        nothing of it was written.
        """
        if not works:
            return []
        for attempt in (1, 2):
            try:
                return self._attempt(works)
            except TRANSIENT_ERRORS as exc:
                self._pool.discard_idle()
                log.warning("database attempt failed", attempt=attempt,
                            deliveries=len(works), error=type(exc).__name__,
                            detail=str(exc).strip()[:200])
        raise DatabaseUnavailableError("the database is unavailable; retry later",
                                       retry_after=self._retry_after_s)

    def run(self, work: Work) -> Any:
        """One work in a transaction of its own; its error, if any, is raised."""
        outcome = self.commit_group([work])[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def close(self) -> None:
        self._pool.discard_idle()

    def _attempt(self, works: Sequence[Work]) -> list[Any]:
        conn = self._pool.get()
        healthy = True
        try:
            with conn.cursor() as cur:
                outcomes: list[Any] = []
                for run in _runs(works):
                    cur.execute(NEXT_SAVEPOINT if outcomes else self._begin)
                    outcomes.extend(_run_together(cur, run) if isinstance(run, list)
                                    else [_one_delivery(cur, run)])
                cur.execute("COMMIT")
                # COMMIT of a failed transaction answers ROLLBACK, without an error:
                # never acknowledge a group that was not written.
                if cur.statusmessage != "COMMIT":
                    raise psycopg2.OperationalError(f"COMMIT answered {cur.statusmessage}")
            return outcomes
        except TRANSIENT_ERRORS:
            healthy = False
            raise
        except BaseException:
            healthy = _rollback(conn)
            raise
        finally:
            # A broken connection is closed, never handed to the next group.
            self._pool.put(conn, healthy=healthy)


def _runs(works: Sequence[Work]) -> list[list[DeliveryWrite] | Work]:
    """Split the group, in order, into runs: consecutive deliveries of one DeliveryWrite
    class (a list, written together by that class), and any other work alone."""
    runs: list[list[DeliveryWrite] | Work] = []
    run: list[DeliveryWrite] | None = None  # the open run, of class type(run[0])
    for work in works:
        if run is not None and type(work) is type(run[0]):
            run.append(work)  # the same class as the run's first: a DeliveryWrite too
        elif isinstance(work, DeliveryWrite):
            run = [work]
            runs.append(run)
        else:
            run = None
            runs.append(work)
    return runs


def _run_together(cur: Cursor, run: list[DeliveryWrite]) -> list[Any]:
    """One savepoint for the run; if the database rejects it, one savepoint each."""
    try:
        return list(type(run[0]).write_together(cur, run))
    except TRANSIENT_ERRORS:
        raise
    except Exception:
        # A row broke a constraint (or a bug): find which, as if they came one by one.
        cur.execute(UNDO_DELIVERY)
        outcomes = []
        for work in run:
            cur.execute(NEXT_SAVEPOINT)
            outcomes.append(_one_delivery(cur, work))
        return outcomes


def _one_delivery(cur: Cursor, work: Work) -> Any:
    """The work's result, or its error once its savepoint is rolled back."""
    try:
        return work(cur)
    except TRANSIENT_ERRORS:
        raise  # the database, not this delivery: the whole group fails
    except REJECTED_BY_DATABASE as exc:
        cur.execute(UNDO_DELIVERY)
        return PayloadError(f"rejected by a database constraint: "
                            f"{str(exc).splitlines()[0][:200]}", code="constraint_violation")
    except IngestError as exc:  # a conflict (409) or a rule checked in the database
        cur.execute(UNDO_DELIVERY)
        return exc
    except Exception as exc:  # a bug in one delivery must not fail the others
        cur.execute(UNDO_DELIVERY)
        return exc


def _rollback(conn: Connection) -> bool:
    """Roll back; return False if the connection is unusable afterwards."""
    try:
        with conn.cursor() as cur:
            cur.execute("ROLLBACK")
    except psycopg2.Error:
        return False
    return True


def _close(conn: Connection) -> None:
    with contextlib.suppress(psycopg2.Error):  # closing a dead connection may complain
        conn.close()
