"""bench/cpu_usage: which Postgres processes count as what in the ledger bench's split of
the database's CPU (titles as Postgres 15 sets them), and the idle JVMs' fixed share."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from cpu_usage import PostgresSnapshot, fixed_us_per_event, postgres_split, role_of


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


def test_postgres_split_counts_an_exited_process_as_exited_never_negative() -> None:
    # An autovacuum worker (pid 30) had 4.0 s when the run began and exits during it:
    # the postmaster reaps its 4.5 s, and a short connection (pid 40, born and gone in
    # the run) 0.3 s. The old split (live roles before and after, reaped as backends)
    # gave background -4.0 s and backends +4.8 s.
    before = PostgresSnapshot(reaped=10.0, live={
        1: ("background", 0.5), 20: ("backends", 2.0), 30: ("background", 4.0),
        50: ("walsender", 1.0)})
    after = PostgresSnapshot(reaped=14.8, live={
        1: ("background", 0.6), 20: ("backends", 7.0), 50: ("walsender", 2.5),
        60: ("background", 0.2)})  # a new autovacuum worker
    split = postgres_split(before, after)
    assert split == pytest.approx({"backends": 5.0, "walsender": 1.5,
                                   "background": 0.3, "exited": 0.8})
    assert all(seconds >= 0 for seconds in split.values())


def test_postgres_split_treats_a_reused_pid_of_another_role_as_a_new_process() -> None:
    before = PostgresSnapshot(reaped=0.0, live={7: ("background", 3.0)})
    after = PostgresSnapshot(reaped=3.5, live={7: ("backends", 0.25)})
    assert postgres_split(before, after) == pytest.approx(
        {"backends": 0.25, "walsender": 0.0, "background": 0.0, "exited": 0.5})
