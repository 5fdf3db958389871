"""The runtime calls exactly the hooks BatchHandler declares, and every handler has them."""

from __future__ import annotations

import importlib

import pytest

from paystream.consumers.crash_hooks import CrashHooks
from paystream.consumers.handler import BatchHandler
from paystream.consumers.runtime import BatchConsumer
from paystream.consumers.settings import ConsumerSettings

HOOKS = sorted(name for name, value in vars(BatchHandler).items()
               if not name.startswith("_") and callable(value))
HANDLERS = ["paystream.consumers.ledger.handler:LedgerHandler",
            "paystream.consumers.dead_letters.mirror:DlqMirrorHandler"]


def test_the_protocol_declares_the_runtime_hooks() -> None:
    assert HOOKS == ["after_batch", "apply"]


@pytest.mark.parametrize("path", HANDLERS)
def test_every_handler_implements_every_hook(path: str) -> None:
    module, name = path.split(":")
    handler = getattr(importlib.import_module(module), name)
    for hook in HOOKS:
        assert callable(getattr(handler, hook, None)), f"{name} lacks {hook}"


def test_the_dlq_mirror_does_nothing_between_batches() -> None:
    from paystream.consumers.dead_letters.mirror import DlqMirrorHandler

    def no_connection() -> None:
        raise AssertionError("the mirror opened a connection between batches")

    DlqMirrorHandler().after_batch(no_connection)


class _Db:
    def connection(self) -> None:
        raise AssertionError("only the handler may call it")


class _NothingPending:
    """The commit protocol with no offsets left to commit."""

    def __init__(self) -> None:
        self.pending: dict[tuple[str, int], int] = {}


class _Client:
    """consume() returns nothing and stops the loop after `polls` waiting calls: an
    iteration first takes what is already fetched (timeout 0), then waits once."""

    def __init__(self, runtime: BatchConsumer, polls: int) -> None:
        self.runtime, self.polls = runtime, polls

    def consume(self, _n: int, timeout: float) -> list[object]:
        if timeout == 0:
            return []
        self.polls -= 1
        if self.polls == 0:
            self.runtime._stopping = True
        return []


class _Recording:
    name = "recording"

    def __init__(self) -> None:
        self.after: list[object] = []

    def apply(self, cur: object, records: object) -> None:
        raise AssertionError("no records were polled")

    def after_batch(self, connection: object) -> None:
        self.after.append(connection)


def _runtime(handler: _Recording, polls: int) -> BatchConsumer:
    db = _Db()
    runtime = BatchConsumer(ConsumerSettings(group="g", topics=("t",), dlq_topic="t.dlq"),
                            handler, db=db, hooks=CrashHooks())
    runtime._consumer = _Client(runtime, polls)
    runtime._protocol = _NothingPending()
    # The runtime's own lookup of its group's stop (once a second, on the connection
    # the handler gets too) is left out here: tests/integration/test_ledger_flood.py.
    runtime._next_stop_check = float("inf")
    return runtime


def test_after_batch_runs_on_every_iteration_with_the_connection_factory() -> None:
    handler = _Recording()
    runtime = _runtime(handler, polls=3)
    runtime._loop()
    assert len(handler.after) == 3
    assert all(c == runtime._db.connection for c in handler.after)


def test_after_batch_waits_while_a_failed_batch_is_retried() -> None:
    handler = _Recording()
    runtime = _runtime(handler, polls=2)
    runtime._stall_started = 1.0
    runtime._loop()
    assert handler.after == []
