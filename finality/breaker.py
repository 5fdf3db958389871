"""A circuit breaker for one RPC endpoint: a small state machine with an injectable clock.

    CLOSED ──N failures within `window` s──▶ OPEN ──`cooldown` s──▶ HALF_OPEN
      ▲                                         ▲                        │
      └──────────── probe succeeded ────────────┼──── probe failed ──────┘

- CLOSED: calls go through; failures older than `window` are forgotten, so a slow trickle
  of errors never opens it.
- OPEN: calls fail fast with CircuitOpenError, without touching the network: an RPC outage
  costs the watcher microseconds per tick, not a timeout per pending deposit.
- HALF_OPEN: exactly one caller (the probe) is let through; the others still fail fast
  until the probe reports. Success closes the breaker, failure re-opens it for another
  cooldown.

Not thread-safe by design: one watcher per network calls it from one thread.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum


class BreakerState(IntEnum):
    # Values are what the breaker-state gauge shows (0 healthy, 2 cut off).
    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class CircuitOpenError(RuntimeError):
    """The call was not made: the endpoint is considered down until `retry_in` s pass."""

    def __init__(self, name: str, retry_in: float) -> None:
        super().__init__(f"circuit {name} is open; next probe in {retry_in:.1f} s")
        self.retry_in = retry_in


@dataclass(frozen=True)
class BreakerPolicy:
    failures: int = 5  # N failures ...
    window: float = 30.0  # ... within this many seconds open the breaker
    cooldown: float = 10.0  # open this long before one probe is let through

    def __post_init__(self) -> None:
        if self.failures < 1 or self.window <= 0 or self.cooldown < 0:
            raise ValueError(f"invalid breaker policy {self}")


class CircuitBreaker:
    def __init__(self, name: str, policy: BreakerPolicy | None = None, *,
                 clock: Callable[[], float] = time.monotonic,
                 on_change: Callable[[BreakerState], None] | None = None) -> None:
        self.name = name
        self.policy = policy or BreakerPolicy()
        self._clock = clock
        self._on_change = on_change
        self._state = BreakerState.CLOSED
        self._failures: deque[float] = deque()
        self._opened_at = 0.0
        self._probe_in_flight = False
        if on_change is not None:
            on_change(self._state)

    @property
    def state(self) -> BreakerState:
        """The state as of now (an OPEN breaker whose cooldown passed reads HALF_OPEN)."""
        if self._state is BreakerState.OPEN and self._cooldown_left() <= 0:
            self._set(BreakerState.HALF_OPEN)
        return self._state

    def before_call(self) -> None:
        """Raise CircuitOpenError unless this call may go out; a permitted call must be
        followed by exactly one record_success() or record_failure()."""
        state = self.state
        if state is BreakerState.CLOSED:
            return
        if state is BreakerState.HALF_OPEN and not self._probe_in_flight:
            self._probe_in_flight = True
            return
        raise CircuitOpenError(self.name, max(self._cooldown_left(), 0.0))

    def record_success(self) -> None:
        self._probe_in_flight = False
        self._failures.clear()
        if self._state is not BreakerState.CLOSED:
            self._set(BreakerState.CLOSED)

    def record_failure(self) -> None:
        now = self._clock()
        if self._state is BreakerState.HALF_OPEN:
            # The probe failed: the endpoint is still down; wait another cooldown.
            self._probe_in_flight = False
            self._open(now)
            return
        if self._state is BreakerState.OPEN:
            return  # a call that was let out before the breaker opened
        self._failures.append(now)
        while self._failures and self._failures[0] <= now - self.policy.window:
            self._failures.popleft()
        if len(self._failures) >= self.policy.failures:
            self._open(now)

    def call(self, fn: Callable[[], object], is_failure: Callable[[BaseException], bool]
             = lambda exc: True) -> object:
        """Run fn under the breaker; exceptions for which is_failure() is true count."""
        self.before_call()
        try:
            result = fn()
        except BaseException as exc:
            if is_failure(exc):
                self.record_failure()
            else:
                self.record_success()
            raise
        self.record_success()
        return result

    def _open(self, now: float) -> None:
        self._opened_at = now
        self._failures.clear()
        self._set(BreakerState.OPEN)

    def _cooldown_left(self) -> float:
        return self._opened_at + self.policy.cooldown - self._clock()

    def _set(self, state: BreakerState) -> None:
        self._state = state
        if self._on_change is not None:
            self._on_change(state)
