"""The circuit breaker as a state machine, on an injected clock."""

from __future__ import annotations

import pytest

from paystream.finality.breaker import (
    BreakerPolicy,
    BreakerState,
    CircuitBreaker,
    CircuitOpenError,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make(failures: int = 3, window: float = 10, cooldown: float = 5):
    clock = Clock()
    states: list[BreakerState] = []
    breaker = CircuitBreaker("t", BreakerPolicy(failures, window, cooldown), clock=clock,
                             on_change=states.append)
    return breaker, clock, states


def test_opens_after_n_failures_within_the_window() -> None:
    breaker, clock, _ = make()
    for _ in range(2):
        breaker.record_failure()
        clock.now += 1
    assert breaker.state is BreakerState.CLOSED
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    with pytest.raises(CircuitOpenError) as exc:
        breaker.before_call()
    assert exc.value.retry_in == pytest.approx(5)


def test_failures_outside_the_window_are_forgotten() -> None:
    breaker, clock, _ = make(failures=3, window=10)
    for _ in range(10):
        breaker.record_failure()
        clock.now += 6  # never 3 within 10 s
    assert breaker.state is BreakerState.CLOSED


def test_success_resets_the_count() -> None:
    breaker, _, _ = make(failures=2)
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED


def test_half_open_allows_a_single_probe_then_closes_on_success() -> None:
    breaker, clock, states = make(failures=1, cooldown=5)
    breaker.record_failure()
    clock.now += 4.9
    with pytest.raises(CircuitOpenError):
        breaker.before_call()
    clock.now += 0.1
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.before_call()
    with pytest.raises(CircuitOpenError):
        breaker.before_call()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    breaker.before_call()
    assert states == [BreakerState.CLOSED, BreakerState.OPEN, BreakerState.HALF_OPEN,
                      BreakerState.CLOSED]


def test_failed_probe_reopens_for_a_full_cooldown() -> None:
    breaker, clock, _ = make(failures=1, cooldown=5)
    breaker.record_failure()
    clock.now += 5
    breaker.before_call()
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    clock.now += 4
    assert breaker.state is BreakerState.OPEN
    clock.now += 1
    assert breaker.state is BreakerState.HALF_OPEN


def test_call_counts_only_failures_the_caller_says_are_failures() -> None:
    breaker, _, _ = make(failures=1)

    def not_found() -> None:
        raise LookupError("null result")

    with pytest.raises(LookupError):
        breaker.call(not_found, is_failure=lambda exc: not isinstance(exc, LookupError))
    assert breaker.state is BreakerState.CLOSED
    with pytest.raises(ZeroDivisionError):
        breaker.call(lambda: 1 / 0)
    assert breaker.state is BreakerState.OPEN


@pytest.mark.parametrize("policy", [(0, 10, 5), (3, 0, 5), (3, 10, -1)])
def test_invalid_policies_are_refused(policy) -> None:
    with pytest.raises(ValueError):
        BreakerPolicy(*policy)
