"""paystream/edge/db_threads.py: work handed to the database threads, without a database (a
connection here is a stand-in that only says whether it is idle; the API's integration
tests run the real thing)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from typing import Any

import psycopg2.extensions
import pytest

from paystream.edge.db_threads import DatabaseThreads, WaitedTooLong

IDLE = psycopg2.extensions.TRANSACTION_STATUS_IDLE
IN_TRANSACTION = psycopg2.extensions.TRANSACTION_STATUS_INTRANS
request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")


class StandIn:
    """What DatabaseThreads asks of a connection."""

    opened = 0

    def __init__(self) -> None:
        StandIn.opened += 1
        self.number = StandIn.opened
        self.closed = 0
        self.status = IDLE

    def get_transaction_status(self) -> int:
        return self.status

    def close(self) -> None:
        self.closed = 1


def threads(size: int = 2, max_wait_s: float | None = None) -> DatabaseThreads:
    return DatabaseThreads(size, StandIn, name="test-db",  # type: ignore[arg-type]
                           max_wait_s=max_wait_s)


def test_work_runs_in_a_database_thread_in_the_callers_context() -> None:
    pool = threads()

    def work(conn: Any) -> tuple[str, str]:
        return threading.current_thread().name, request_id.get()

    async def call() -> tuple[str, str]:
        request_id.set("req-1")
        return await pool.run(work)

    try:
        name, seen = asyncio.run(call())
    finally:
        pool.close()
    assert name.startswith("test-db-") and seen == "req-1"


def test_a_failure_is_raised_to_the_caller_and_the_thread_goes_on() -> None:
    pool = threads(size=1)

    def boom(conn: Any) -> None:
        raise ValueError("no such thing")

    async def calls() -> int:
        with pytest.raises(ValueError, match="no such thing"):
            await pool.run(boom)
        return await pool.run(lambda conn: conn.number)

    try:
        first = asyncio.run(calls())
        assert asyncio.run(pool.run(lambda conn: conn.number)) == first  # kept: idle
    finally:
        pool.close()


def test_a_connection_left_in_a_transaction_is_closed_and_replaced() -> None:
    pool = threads(size=1)

    def leave_open(conn: Any) -> Any:
        conn.status = IN_TRANSACTION
        return conn

    try:
        left = asyncio.run(pool.run(leave_open))
        after, closed = asyncio.run(pool.run(lambda conn: (conn, conn.closed)))
    finally:
        pool.close()
    assert left.closed and after is not left and not closed
    assert after.closed  # and close() closed the thread's connection


def test_work_that_waited_too_long_for_a_thread_never_runs() -> None:
    pool = threads(size=1, max_wait_s=0.05)
    ran: list[str] = []

    def slow(conn: Any) -> None:
        time.sleep(0.2)
        ran.append("slow")

    async def both() -> list[Any]:
        first = asyncio.ensure_future(pool.run(slow))
        await asyncio.sleep(0.01)  # the one thread is busy now
        late = pool.run(lambda conn: ran.append("late"))
        return await asyncio.gather(first, late, return_exceptions=True)

    try:
        answers = asyncio.run(both())
    finally:
        pool.close()
    assert answers[0] is None and isinstance(answers[1], WaitedTooLong)
    assert ran == ["slow"]


def test_at_most_size_works_run_at_once_and_each_thread_keeps_its_connection() -> None:
    pool = threads(size=3)
    running = 0
    most = 0
    lock = threading.Lock()

    def work(conn: Any) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return int(conn.number)

    async def many() -> list[int]:
        return await asyncio.gather(*(pool.run(work) for _ in range(30)))

    try:
        used = asyncio.run(many())
    finally:
        pool.close()
    assert most == 3 and len(set(used)) == 3
