"""`paystream run` restarts a dead service later each time it dies again soon."""

from __future__ import annotations

from paystream import run


def test_a_service_that_keeps_dying_waits_longer_each_time(monkeypatch) -> None:
    svc = run.Service("ledger", "paystream.consume", ["consume", "ledger"], "-")
    clock = [1000.0]
    monkeypatch.setattr(run.time, "monotonic", lambda: clock[0])
    svc.started_at = clock[0]
    assert [svc.next_restart_delay() for _ in range(7)] == [2, 4, 8, 16, 32, 60, 60]
    clock[0] += run.QUICK_EXIT_S  # it ran a minute before dying: back to the first delay
    assert svc.next_restart_delay() == run.RESTART_DELAY_S
