"""Waiting in a test for something the real stack does in its own time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0,
             interval: float = 0.05) -> T:
    """`probe()`'s first truthy answer; AssertionError naming `what` when time is up."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def wait_until(check: Callable[[], bool], timeout_s: float, what: str,
               interval_s: float = 0.2) -> None:
    """wait_for with the argument order the consumer tests use."""
    wait_for(what, check, timeout_s, interval_s)
