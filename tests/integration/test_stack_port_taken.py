"""A second stack whose Postgres port the running one holds (a test stack left running
by a clone since deleted, say): its start names the process in the way and keeps none
of the machine's huge pages, and its `stack down` gives back what an earlier failed start
may have kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from paystream.stack import huge_pages, postgres
from paystream.stack.process import StackError
from paystream.stack.settings import StackSettings


def test_a_start_on_a_taken_port_names_the_holder_and_keeps_no_huge_pages(
        tmp_path: Path) -> None:
    running = StackSettings.from_env()
    holder = postgres.pid(running)
    assert holder is not None, "the test stack's Postgres is not running"
    other = running.model_copy(update={"state_dir": tmp_path / "other-stack"})
    postgres.ensure_cluster(other)  # a cluster of its own, on the running one's port
    pool_before = huge_pages.pool()[0]

    with pytest.raises(StackError) as raised:
        postgres.start(other)

    message = str(raised.value)
    assert f"port {running.pg_port} is taken by pid {holder}: " in message, message
    assert str(running.pg_data) in message  # the holder's command line names its data
    assert "PAYSTREAM_PG_PORT" in message
    # The start reserved its pool's pages before it found the port taken (seen: the pool
    # grew by 540 and stayed so): they are given back.
    assert huge_pages.pool()[0] == pool_before
    assert postgres.pid(other) is None

    # A reservation a failed start left behind (`stack up` reserves in a step of its
    # own, before the start) is given back by `stack down`'s stop.
    added = other.run_dir / "postgres-huge-pages"
    total, available = huge_pages.pool()
    outcome = huge_pages.reserve(available + 8, added)  # must grow the pool by 8
    assert huge_pages.pool()[0] == total + 8, outcome
    assert postgres.stop(other) is False  # it was not running
    assert huge_pages.pool()[0] == total
    assert not added.exists()
