"""The previous release keeps running while the new migrations are applied: its ingest
and its ledger (the code of the commit before the newest migration, read from git, run
with this venv) take signed deposits through the outbox, Debezium and Kafka into the
books of the test stack's database, which `stack up` migrated to this commit's newest
schema. Every accepted deposit is applied exactly once and the user's books reconcile:
a migration that breaks the release before it fails here (docs/operations.md,
"Upgrading")."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from paystream.launch import paystream_argv
from paystream.schema.db import Connection
from paystream.schema.events import PAYMENTS_TOPIC
from tests.support.consumers import ProcessPool, start_at_end
from tests.support.ids import unique
from tests.support.ingest import (
    ingest_env,
    ingest_server,
    known_user,
    payment_body,
    payment_headers,
)
from tests.support.releases import previous_release
from tests.support.waiting import wait_until

DEPOSITS = 20


def test_the_release_before_the_newest_migration_runs_on_the_new_schema(
        db: Connection, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = previous_release(tmp_path)
    # Its processes start outside this tree: `python -m` puts the working folder first
    # on the path, before PYTHONPATH, and this tree's `paystream/` would win.
    monkeypatch.chdir(tmp_path)
    current = {p.name for p in Path(__file__).resolve().parents[2].joinpath(
        "schema", "migrations").glob("*.sql")}
    assert current - release.migrations, "the previous release shipped every migration"
    with db.cursor() as cur:
        cur.execute("SELECT name || '.sql' FROM schema_migrations")
        assert current <= {row[0] for row in cur.fetchall()}, "the stack is not migrated"

    old = {"PYTHONPATH": str(release.view)}
    # The code that runs is the old release's (the view's modules, not this tree's).
    where = subprocess.run(
        [sys.executable, "-c", "import paystream.cli; print(paystream.cli.__file__)"],
        env={**os.environ, **old}, capture_output=True, text=True, timeout=30, check=True)
    assert where.stdout.strip().startswith(str(release.view)), where.stdout

    user = known_user("previous-release")
    group = unique("previous-release-ledger")
    start_at_end(group, PAYMENTS_TOPIC)
    pool = ProcessPool(tmp_path / "logs")
    try:
        pool.start("ledger", topic=PAYMENTS_TOPIC, group=group,
                   dlq_topic=unique("previous-release-dlq"), env=old)
        ids = [f"{user}-{uuid.uuid4().hex[:8]}" for _ in range(DEPOSITS)]
        with ingest_server({**ingest_env(), **old}, log_path=tmp_path / "old-ingest.log"
                           ) as server, httpx.Client(base_url=server.url, timeout=10) as http:
            for event_id in ids:
                body = payment_body(event_id, user, "2.5")
                answer = http.post("/webhooks/payments", content=body,
                                   headers=payment_headers(body))
                assert answer.status_code == 200, (answer.status_code, answer.text)

        def applied() -> bool:
            with db.cursor() as cur:
                cur.execute("SELECT count(*) FROM event_status WHERE event_id = ANY(%s)"
                            " AND status = 'applied'", (ids,))
                return cur.fetchone()[0] == DEPOSITS

        try:
            wait_until(applied, 60, "the old ledger applied every deposit")
        except AssertionError:
            raise AssertionError(pool.logs()) from None
        with db.cursor() as cur:
            cur.execute("SELECT balance FROM balances WHERE user_id = %s AND asset = 'USD'",
                        (user,))
            assert cur.fetchone()[0] == Decimal("2.5") * DEPOSITS
            cur.execute("SELECT count(*) FROM transfers WHERE source_event_id = ANY(%s)",
                        (ids,))
            assert cur.fetchone()[0] == DEPOSITS  # each applied once
    finally:
        pool.kill_all()
    # This release's reconcile over the user the old one booked.
    done = subprocess.run(paystream_argv("reconcile", "--user", user),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
