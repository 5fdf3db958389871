"""Group commit: many deliveries in one transaction, each answered after its COMMIT.

The protocol, step by step (the README's ingest section repeats it):
  1. A request that passed every check before the database (signature, validation)
     hands its database work to `GroupCommitWriter.write` and waits.
  2. A writer thread that is free takes what is queued, up to `max_batch` deliveries,
     after waiting at most `linger_s` for more (0: no added wait, "natural batching":
     one delivery at a time when traffic is light, bigger groups as it grows).
  3. ingest.store.EventStore.commit_group runs the group in ONE transaction, each
     delivery inside its own SAVEPOINT: a delivery that fails (409, 400) is rolled back
     alone, the others go on. Deliveries run in arrival order, so two identical
     redeliveries in one group come out as accepted, then duplicate.
  4. COMMIT. Only after COMMIT returned are the group's requests answered, all in one
     wake-up of their event loop (one thread hop per group, not per request; the hop
     the other way is per loop iteration too: requests queued by one turn of the event
     loop reach the writers together, so a writer thread is woken once for them).
  5. If the database fails (connection lost, timeout, deadlock) the group is retried
     once on a fresh connection; if that fails too, every delivery of the group is
     answered 503 + Retry-After. Nothing of the group was acknowledged.

Several writer threads (one connection each) overlap one group's WAL flush with the
next group's statements. Threads start on the first write, in the process that serves
(uvicorn forks its workers after importing the app factory).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from paystream.ingest.errors import DatabaseUnavailableError
from paystream.ingest.store import Cursor, EventStore

T = TypeVar("T")
log = structlog.get_logger("paystream.ingest.writer")
STOP = None  # queued once per writer thread by close()
Loop = asyncio.AbstractEventLoop


@dataclass(eq=False, slots=True)
class _Pending:
    """One delivery's database work and the future its request awaits."""

    work: Callable[[Cursor], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


class GroupCommitWriter:
    def __init__(self, store: EventStore, *, writers: int, max_batch: int, linger_s: float,
                 on_commit: Callable[[int, float], None] | None = None) -> None:
        self._store = store
        self._writers = writers
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._on_commit = on_commit  # with each committed group's size and seconds
        # Lists of deliveries, each list what one turn of an event loop queued.
        self._queue: queue.SimpleQueue[list[_Pending] | None] = queue.SimpleQueue()
        self._next: dict[Loop, list[_Pending]] = {}  # per loop: not yet handed over
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()

    async def write(self, work: Callable[[Cursor], T]) -> T:
        """Run `work` in the next group; return its result once that group committed."""
        if not self._threads:
            self._start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        waiting = self._next.setdefault(loop, [])
        if not waiting:  # the first of this turn: hand the turn's deliveries over after it
            loop.call_soon(self._hand_over, loop)
        waiting.append(_Pending(work, future, loop))
        return await future

    def _hand_over(self, loop: Loop) -> None:
        """On the loop: one queue item (one writer wake-up) for a turn's deliveries."""
        waiting = self._next.pop(loop, [])
        for start in range(0, len(waiting), self._max_batch):
            self._queue.put(waiting[start:start + self._max_batch])

    def close(self, timeout_s: float = 10.0) -> None:
        """Let the writers finish what is queued, then stop them."""
        with self._start_lock:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(STOP)
        for thread in threads:
            thread.join(timeout_s)

    def _start(self) -> None:
        with self._start_lock:
            while len(self._threads) < self._writers:
                thread = threading.Thread(target=self._run, daemon=True,
                                          name=f"ingest-writer-{len(self._threads)}")
                thread.start()
                self._threads.append(thread)

    def _run(self) -> None:
        carried: list[_Pending] = []
        while True:
            group, carried, stop = self._take(carried)
            if group:
                self._commit(group)
            if stop:
                if carried:
                    self._commit(carried)
                return

    def _take(self, carried: list[_Pending]) -> tuple[list[_Pending], list[_Pending], bool]:
        """Block for deliveries, then take what else is queued (step 2).

        Returns the group, what did not fit in it (this thread's next group starts with
        it), and whether to stop.
        """
        group = carried or self._queue.get()
        if group is STOP:
            return [], [], True
        deadline = time.monotonic() + self._linger_s
        while len(group) < self._max_batch:
            try:
                remaining = deadline - time.monotonic()
                more = (self._queue.get(timeout=remaining) if remaining > 0
                        else self._queue.get_nowait())
            except queue.Empty:
                break
            if more is STOP:
                return group, [], True
            room = self._max_batch - len(group)
            group = group + more[:room]
            if len(more) > room:
                return group, more[room:], False
        return group, [], False

    def _commit(self, group: list[_Pending]) -> None:
        """Steps 3 to 5: one transaction for the group, then answer every delivery."""
        started = time.perf_counter()
        try:
            outcomes: list[Any] = self._store.commit_group([p.work for p in group])
        except DatabaseUnavailableError as exc:
            outcomes = [DatabaseUnavailableError(exc.detail, retry_after=exc.retry_after)
                        for _ in group]
        except Exception as exc:  # a bug outside any delivery: answer 500, keep serving
            log.exception("group commit failed", deliveries=len(group))
            outcomes = [exc] * len(group)
        else:
            if self._on_commit is not None:
                self._on_commit(len(group), time.perf_counter() - started)
        by_loop: dict[Loop, list[tuple[asyncio.Future[Any], Any]]] = defaultdict(list)
        for pending, outcome in zip(group, outcomes, strict=True):
            by_loop[pending.loop].append((pending.future, outcome))
        for loop, answers in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop: its requests are gone
                loop.call_soon_threadsafe(_settle, answers)


def _settle(answers: list[tuple[asyncio.Future[Any], Any]]) -> None:
    """On the event loop: wake every request of a committed (or failed) group."""
    for future, outcome in answers:
        if future.done():  # the request was cancelled (client gone); it stays written
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
