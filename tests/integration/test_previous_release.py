"""An upgrade under traffic, on the test stack: the previous release (the code of the
commit before the newest migration, read from git, run with this venv) serves signed
deposits through two ingests behind a round-robin balancer and its ledger, on this
release's schema; migrations are applied under that traffic; then each process is
replaced by this release's, one at a time. Every deposit answered 2xx is applied
exactly once, no webhook is answered 5xx, and the books of its users reconcile
(docs/operations.md, "Upgrading").

The migrations applied are an expand step of the rule's own shape (a column, an index
built CONCURRENTLY, then dropped again), with a lock_timeout of 300 ms: no insert of
the ingest waits a second behind them. A migration that holds a lock on payment_events
(the kind the linter refuses) is seen by the same measurement: that is the check that
the measurement can fail. bench/upgrade_bench.py runs the whole of it on a stack of its
own at 1 M events with the real newest migrations."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, closing
from pathlib import Path

import pytest

from paystream.launch import paystream_argv
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.events import PAYMENTS_TOPIC
from paystream.schema.migrate import MigrateSettings, apply_pending
from tests.support.consumers import ConsumerProcess, start_at_end
from tests.support.ids import unique
from tests.support.ingest import create_users, ingest_env, ingest_server
from tests.support.releases import previous_release
from tests.support.upgrade import LockSampler, Sender, books, wait_applied

RATE = 60  # signed deposits a second
COLUMN = "upgrade_test_note"
EXPAND = [
    ("9001_upgrade_test_column", f"ALTER TABLE payment_events ADD COLUMN {COLUMN} TEXT;"),
    ("9002_upgrade_test_index", "-- migrate: autocommit\n"
     "DROP INDEX CONCURRENTLY IF EXISTS upgrade_test_idx;\n"
     f"CREATE INDEX CONCURRENTLY upgrade_test_idx ON payment_events ({COLUMN});\n"),
    ("9003_upgrade_test_contract", "-- migrate: autocommit\n"
     "DROP INDEX CONCURRENTLY IF EXISTS upgrade_test_idx;\n"
     f"ALTER TABLE payment_events DROP COLUMN IF EXISTS {COLUMN};\n"),
]
# Holds what a plain CREATE INDEX holds on payment_events, for a known time.
BLOCKING = [("9004_upgrade_test_blocking",
             "LOCK TABLE payment_events IN SHARE MODE; SELECT pg_sleep(2);")]
FAST_LOCKS = MigrateSettings(PAYSTREAM_MIGRATE_LOCK_TIMEOUT_MS=300,
                             PAYSTREAM_MIGRATE_RETRY_PAUSE_S=0.2)


def _migrate(files: list[tuple[str, str]]) -> list[str]:
    with closing(connect(database_url("owner"), application_name="test-upgrade")) as conn:
        return apply_pending(conn, settings=FAST_LOCKS, files=files)


def _forget(db: Connection) -> None:
    with db.cursor() as cur:
        cur.execute(f"ALTER TABLE payment_events DROP COLUMN IF EXISTS {COLUMN}")
        cur.execute("DELETE FROM schema_migrations WHERE name LIKE '900%%_upgrade_test_%%'")


def _measured(sampler: LockSampler, step: Callable[[], object]) -> float:
    """The longest lock wait on the ingest's tables while `step()` runs."""
    sampler.longest_s = 0.0
    step()
    time.sleep(0.3)  # the sampler's last reads
    return sampler.longest_s


def test_an_upgrade_under_traffic_answers_every_webhook_and_applies_each_once(
        db: Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = previous_release(tmp_path)
    # Its processes start outside this tree: `python -m` puts the working folder first
    # on the path, before PYTHONPATH, and this tree's `paystream/` would win.
    monkeypatch.chdir(tmp_path)
    old = {"PYTHONPATH": str(release.view)}
    where = subprocess.run(
        [sys.executable, "-c", "import paystream.cli; print(paystream.cli.__file__)"],
        env={**os.environ, **old}, capture_output=True, text=True, timeout=30, check=True)
    assert where.stdout.strip().startswith(str(release.view)), where.stdout
    users = [unique("upgrade") for _ in range(12)]
    create_users(users)
    group = unique("upgrade-ledger")
    start_at_end(group, PAYMENTS_TOPIC)
    logs = tmp_path / "logs"
    logs.mkdir()
    sender, sampler = Sender(users, RATE), LockSampler()
    every: list[ConsumerProcess] = []
    _forget(db)
    with ExitStack() as stack:
        stack.callback(_forget, db)
        stack.callback(lambda: [p.kill() for p in every if p.alive()])
        stack.callback(sampler.stop.set)
        stack.callback(sender.stop.set)
        slots = [stack.enter_context(ExitStack()) for _ in range(2)]
        sender.urls[:] = [s.enter_context(ingest_server(
            {**ingest_env(), **old}, log_path=logs / f"old-ingest-{i}.log")).url
            for i, s in enumerate(slots)]
        every.append(ConsumerProcess.start("ledger", topic=PAYMENTS_TOPIC, group=group,
                                           dlq_topic=unique("upgrade-dlq"), log_dir=logs,
                                           env=old, name="old-ledger"))
        threads = [threading.Thread(target=sender.run), threading.Thread(target=sampler.run)]
        for t in threads:
            t.start()
        time.sleep(2)
        online = _measured(sampler, lambda: _migrate(EXPAND))
        blocked = _measured(sampler, lambda: _migrate(BLOCKING))
        for i in range(2):  # a new ingest joins the balancer, then the old one leaves
            fresh = stack.enter_context(ExitStack())
            sender.urls[i] = fresh.enter_context(ingest_server(
                ingest_env(), log_path=logs / f"new-ingest-{i}.log")).url
            slots[i].close()
        every.append(ConsumerProcess.start("ledger", topic=PAYMENTS_TOPIC, group=group,
                                           dlq_topic=unique("upgrade-dlq"), log_dir=logs,
                                           name="new-ledger"))
        time.sleep(3)  # it joins the group before the old one leaves
        assert every[0].terminate() == 0, every[0].tail()
        time.sleep(2)
        sender.stop.set()
        threads[0].join()
        wait_applied(sender.answers, 60)
        lost, double = books(sender.answers)
        statuses = {a.status for a in sender.answers}
        assert every[1].terminate() == 0, every[1].tail()
    print(f"longest lock wait: online migrations {online:.2f} s, blocking {blocked:.2f} s;"
          f" {len(sender.answers)} answers {sorted(statuses, key=str)}, lost {lost},"
          f" double {double}")
    assert online <= 1.0, f"an insert waited {online:.2f} s behind the online migrations"
    assert blocked >= 1.5, f"the blocking migration held inserts only {blocked:.2f} s"
    assert statuses <= {200, 503}, statuses  # a 503 is the retryable answer
    assert len(sender.answers) >= RATE * 8 and lost == 0 and double == 0, (
        len(sender.answers), lost, double)
    done = subprocess.run(paystream_argv("reconcile", *[a for u in users for a in
                                                        ("--user", u)]),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

