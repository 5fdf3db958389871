"""bench/cpu_usage: which Postgres processes count as what in the ledger bench's split of
the database's CPU (titles as Postgres 15 sets them), and the idle JVMs' fixed share."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from cpu_usage import fixed_us_per_event, role_of


@pytest.mark.parametrize(("title", "role"), [
    ("postgres: walsender paystream_cdc 127.0.0.1(58048) START_REPLICATION", "walsender"),
    ("postgres: paystream_ledger paystream 127.0.0.1(40112) idle in transaction", "backends"),
    ("postgres: paystream_ledger paystream 127.0.0.1(40112) COPY", "backends"),
    ("postgres: parallel worker for PID 1234", "backends"),
    ("postgres: checkpointer ", "background"),
    ("postgres: background writer ", "background"),
    ("postgres: walwriter ", "background"),
    ("postgres: autovacuum launcher ", "background"),
    ("postgres: autovacuum worker paystream", "background"),
    ("postgres: logical replication launcher ", "background"),
])
def test_role_of(title: str, role: str) -> None:
    assert role_of(title) == role


def test_fixed_us_per_event_counts_the_jvms_idle_share_at_the_rate() -> None:
    # Connect busy 14 % of a core and the broker 4 % while idle: at 10,000 events/s that
    # is 0.18 s of CPU a second spread over 10,000 events, 18 us each; Postgres's share
    # at rest (autovacuum after the bench's inserts) is not a fixed cost.
    shares = {"postgres": 0.5, "kafka": 0.04, "connect": 0.14}
    assert fixed_us_per_event(shares, 10_000) == pytest.approx(18.0)
    assert fixed_us_per_event(shares, 20_000) == pytest.approx(9.0)
    assert fixed_us_per_event(shares, 0) == 0.0
