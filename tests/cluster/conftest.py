"""The replicated cluster's tests (`make test-cluster`): they run on a stack of their
own, brought up with three Kafka nodes (the Makefile's TEST_CLUSTER_STACK), never on the
single-broker test stack. They stop and kill nodes, so they do not share a stack with
the other integration tests either.

Like every integration test they never skip: a stack that is not a running cluster
fails them, with the command that starts one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from paystream.stack import kafka, quorum
from paystream.stack.settings import StackSettings
from tests.support.waiting import wait_for

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def cluster() -> Iterator[StackSettings]:
    """The cluster's settings, every node up and every partition in sync before and
    after the test (a test that stops nodes leaves them running again, even failed)."""
    s = StackSettings.from_env()
    if s.brokers < 3:
        pytest.fail(f"the stack in {s.state_dir} has {s.brokers} Kafka node(s): these tests "
                    "need a cluster; run `make test-cluster` (or `paystream stack up "
                    "--brokers 3` with another state dir and ports)")
    _all_in_sync(s)
    try:
        yield s
    finally:
        _all_in_sync(s)


def _all_in_sync(s: StackSettings) -> None:
    kafka.start(s)  # whatever a test stopped; nothing when every node runs
    wait_for("every partition in sync on every node",
             lambda: quorum.under_replicated(s) == [], timeout=120, interval=0.5)
