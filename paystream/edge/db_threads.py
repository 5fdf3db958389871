"""psycopg2 work for an asyncio server: a few threads, each with its own connection, fed
from one queue; a coroutine hands a function of a connection over and awaits its result.

Why this and not the usual ways, measured for the merchant API on this project's 2
cores (CPU of the server process per GET of one user's balances rows, driven
in-process, no HTTP; the machine was shared, so ranges): this way 115-145 us;
`loop.run_in_executor` with the same threads 150-180 us (concurrent.futures' locks and
futures); a sync route in Starlette's anyio pool 240-340 us (its CapacityLimiter, and
up to 40 threads on as many connections); asyncpg's pool ~235 us, psycopg 3's async
pool ~260 us. Alone, one query cost psycopg2 in these threads 58-74 us of client CPU,
asyncpg 85-94 us (132-142 us without its statement cache, which a transaction-pooling
PgBouncer needs), psycopg 3 112-116 us. A thread blocks in libpq with the GIL released,
so N threads keep N queries in flight.

A connection left broken or inside a transaction by the work is closed, and the thread
opens a new one for its next job: nothing half done is handed to the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg2
import psycopg2.extensions

from paystream.schema.db import Connection

T = TypeVar("T")
IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE


class WaitedTooLong(Exception):  # noqa: N818 (a condition, not a bug)
    """Every thread stayed busy for longer than the caller may wait: the work never ran."""


# One job: (loop, future, the caller's context, the work, when it was queued).
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context,
             Callable[[Connection], Any], float]


class DatabaseThreads:
    def __init__(self, size: int, open_connection: Callable[[], Connection], *,
                 name: str, max_wait_s: float | None = None) -> None:
        """`size` threads (started on first use), each opening its connection with
        `open_connection` when it needs one. `max_wait_s`: work queued for longer than
        this fails with WaitedTooLong instead of running (None: no bound)."""
        self._size = size
        self._open = open_connection
        self._name = name
        self._max_wait_s = max_wait_s
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()

    async def run(self, work: Callable[[Connection], T]) -> T:
        """work(connection) in one of the threads, in the caller's context (a log line
        it writes carries the request's trace id)."""
        if not self._threads:
            self._start()
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        self._jobs.put((loop, done, contextvars.copy_context(), work, time.monotonic()))
        return await done

    def close(self) -> None:
        """Let the threads finish the work queued, then stop them; each closes its
        connection."""
        with self._start_lock:
            for _ in self._threads:
                self._jobs.put(None)
            for thread in self._threads:
                thread.join()
            self._threads.clear()

    def _start(self) -> None:
        with self._start_lock:
            while len(self._threads) < self._size:
                thread = threading.Thread(target=self._serve, daemon=True,
                                          name=f"{self._name}-{len(self._threads)}")
                thread.start()
                self._threads.append(thread)

    def _serve(self) -> None:
        conn: Connection | None = None
        try:
            while (job := self._jobs.get()) is not None:
                loop, done, context, work, queued = job
                result: Any = None
                failure: BaseException | None = None
                try:
                    if (self._max_wait_s is not None
                            and time.monotonic() - queued > self._max_wait_s):
                        raise WaitedTooLong(f"every database thread was busy for"
                                            f" {self._max_wait_s} s")
                    if conn is None or conn.closed:
                        conn = self._open()
                    result = context.run(work, conn)
                except BaseException as exc:  # handed to the caller, raised there
                    failure = exc
                if conn is not None and (conn.closed
                                         or conn.get_transaction_status() != IDLE):
                    with contextlib.suppress(psycopg2.Error):
                        conn.close()
                    conn = None
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(_settle, done, result, failure)
        finally:
            if conn is not None:
                with contextlib.suppress(psycopg2.Error):
                    conn.close()


def _settle(done: asyncio.Future[Any], result: Any, failure: BaseException | None) -> None:
    """On the loop: the awaiting coroutine's answer (unless it was cancelled)."""
    if done.cancelled():
        return
    if failure is None:
        done.set_result(result)
    else:
        done.set_exception(failure)
