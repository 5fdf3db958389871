"""bench/ledger_bench: a run's CPU seconds become the budget's parts, and the figure of
several runs is each part's own median (the parts' medians need not add up to the
median of `all`)."""

from __future__ import annotations

import pytest

from bench.ledger_bench import TARGETS_US, budget, medians


def test_a_runs_seconds_become_microseconds_per_event_in_the_budgets_parts() -> None:
    # 10,000 events: 0.5 s of Python is 50 us an event.
    us = budget({"python": 0.5, "postgres": 0.8, "kafka": 0.05, "connect": 0.15}, 10_000)
    assert us["python"] == pytest.approx(50)
    assert us["postgres"] == pytest.approx(80)
    assert us["broker+connect"] == pytest.approx(20)
    # `all` is the components once each: broker+connect is not counted again.
    assert us["all"] == pytest.approx(150)
    assert set(TARGETS_US) <= set(us)


def test_each_part_takes_its_own_median() -> None:
    runs = [{"python": 40.0, "postgres": 90.0, "all": 130.0},
            {"python": 60.0, "postgres": 60.0, "all": 120.0},
            {"python": 50.0, "postgres": 70.0, "all": 140.0}]
    assert medians(runs) == {"python": 50.0, "postgres": 70.0, "all": 130.0}
