"""`make test`'s own recipe, run with logging stand-ins for `paystream` and `pytest`:
the unit tests first, with no stack; the test stack is stopped after the integration
tests, passed or not, unless KEEP_TEST_STACK=1."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNIT = "-n 2 --dist loadfile tests/unit"


def run_make_test(tmp_path: Path, pytest_status: int, *extra: str,
                  failing: str = "tests/integration") -> tuple[int, list[str]]:
    """`make test` with BIN pointing at stand-ins that append their arguments and
    state dir to a log; install and lint are taken as done (-o). Returns the exit code
    and the log's lines."""
    log = tmp_path / "calls.log"
    for name, status in (("paystream", 0), ("pytest", pytest_status)):
        stand_in = tmp_path / name
        # `pytest_status` is the status of the run named by `failing` (a word of its
        # arguments); every other run passes.
        stand_in.write_text(f'#!/bin/sh\necho "{name} $* @${{PAYSTREAM_STATE_DIR##*/}}"'
                            f' >> {log}\ncase "$*" in *{failing}*) exit {status};; esac\n'
                            'exit 0\n')
        stand_in.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL")}
    done = subprocess.run(["make", "-s", "--no-print-directory", "-o", "install", "-o", "lint",
                           "test", f"BIN={tmp_path}", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    return done.returncode, log.read_text().splitlines() if log.exists() else []


def test_the_test_stack_stops_after_pytest_then_the_cluster_runs(tmp_path: Path) -> None:
    status, calls = run_make_test(tmp_path, 0)
    assert status == 0
    assert calls == [f"pytest {UNIT} @", "paystream stack up @.stack-test",
                     "pytest tests/integration @.stack-test",
                     "paystream stack down @.stack-test",
                     "paystream stack up @.stack-test-cluster",
                     "pytest tests/cluster --ignore=tests/cluster/test_standby_failover.py"
                     " @.stack-test-cluster",
                     # The same stack given its standby, for the failover tests, last.
                     "paystream stack up @.stack-test-cluster",
                     "pytest tests/cluster/test_standby_failover.py @.stack-test-cluster",
                     "paystream stack down @.stack-test-cluster"]


def test_a_failing_pytest_still_stops_the_stack_and_fails_make(tmp_path: Path) -> None:
    status, calls = run_make_test(tmp_path, 1)
    assert status != 0
    assert calls == [f"pytest {UNIT} @", "paystream stack up @.stack-test",
                     "pytest tests/integration @.stack-test",
                     "paystream stack down @.stack-test"]


def test_failing_unit_tests_stop_make_before_any_stack_is_up(tmp_path: Path) -> None:
    status, calls = run_make_test(tmp_path, 1, failing="tests/unit")
    assert status != 0
    assert calls == [f"pytest {UNIT} @"]


def test_keep_test_stack_leaves_it_running(tmp_path: Path) -> None:
    status, calls = run_make_test(tmp_path, 0, "KEEP_TEST_STACK=1")
    assert status == 0
    assert "paystream stack down @.stack-test" not in calls
    assert calls[:3] == [f"pytest {UNIT} @", "paystream stack up @.stack-test",
                         "pytest tests/integration @.stack-test"]


def test_keep_test_stack_other_than_1_still_stops_it(tmp_path: Path) -> None:
    status, calls = run_make_test(tmp_path, 0, "KEEP_TEST_STACK=0")
    assert status == 0
    assert "paystream stack down @.stack-test" in calls
