"""Reconciliation against the real Postgres: `paystream reconcile` and the hot path.

Balances are built by the real ledger handler (consumers/ledger/handler.py) inside the commit
protocol's apply step; the corruption is test-only SQL.
"""

from __future__ import annotations

import json
import socket
import subprocess
from decimal import Decimal
from pathlib import Path

import psycopg2.extensions
import pytest
import structlog.testing
from prometheus_client import REGISTRY

from paystream.consumers.connection import Database
from paystream.consumers.ledger.reconcile import HotPathReconciler, reconcile
from paystream.consumers.records import Origin, Record
from paystream.launch import paystream_argv
from paystream.schema.db import snapshot
from tests.support.consumers import store_records
from tests.support.ids import unique
from tests.support.ledger import ledger_apply

ROOT = Path(__file__).resolve().parents[2]


def paystream(*args: str) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (same interpreter, same environment)."""
    return subprocess.run(paystream_argv(*args), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def record(user: str, event_id: str, event_type: str, amount: str, asset: str = "USDC",
           offset: int = 0) -> Record:
    value = {"event_id": event_id, "event_type": event_type, "user_id": user,
             "asset": asset, "amount": amount, "provider": "test"}
    return Record(Origin("paystream.payments", 0, offset), user.encode(),
                  json.dumps(value).encode(),
                  (("event_id", event_id.encode()), ("event_type", event_type.encode()),
                   ("trace_id", b"trace-ops-test")), None)


def funded_user(db, ledger_db: Database, asset: str = "USDC") -> str:
    """A user whose balance (7) came from a deposit of 10 and a withdrawal of 3."""
    user = unique("ops-rec")
    batch = [record(user, unique("ev-dep"), "deposit", "10", asset, 0),
             record(user, unique("ev-wd"), "withdrawal", "3", asset, 1)]
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        store_records(cur, batch)  # as the ingest does: the ledger credits only these
    result = ledger_apply(ledger_db.connection(), batch)
    assert result.outcomes["applied"] == 2, result
    return user


@pytest.fixture
def corrupt(db):
    """corrupt(user, by=...): test-only SQL moving money that no journal row explains.

    Teardown puts every corrupted balance back to its journal sum, so the shared ledger
    stays clean for whoever reconciles it next, whether the test passed or not.
    """
    users: list[str] = []

    def apply(user: str, asset: str = "USDC", by: str = "1") -> None:
        users.append(user)
        with db.cursor() as cur:
            cur.execute("UPDATE balances SET balance = balance + %s WHERE user_id = %s"
                        " AND asset = %s", (Decimal(by), user, asset))
            assert cur.rowcount == 1

    yield apply
    with db.cursor() as cur:
        cur.execute("UPDATE balances AS b SET balance = coalesce((SELECT sum(delta)"
                    " FROM user_entries AS j WHERE j.book = 'available' AND j.user_id = b.user_id"
                    " AND j.asset = b.asset), 0) WHERE b.user_id = ANY(%s)", (users,))


def test_clean_user_reconciles(db, ledger_db) -> None:
    user = funded_user(db, ledger_db)
    report = reconcile(db, users=[user])
    assert report.clean and report.balances_checked == 1
    done = paystream("reconcile", "--user", user)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reconcile: ok, 1 balances match their accounts' postings" in done.stdout


def test_corrupted_balance_is_caught_by_the_cli(db, ledger_db, corrupt) -> None:
    user = funded_user(db, ledger_db)
    clean = funded_user(db, ledger_db)
    corrupt(user)
    # The whole ledger: other tests' data may be there too; ours must be listed.
    done = paystream("reconcile")
    assert done.returncode == 1, done.stdout + done.stderr
    row = next((line for line in done.stdout.splitlines() if user in line), None)
    assert row is not None, done.stdout
    assert row.split() == ["available", user, "USDC", "8", "7", "1", "journal_differs"]
    assert clean not in done.stdout
    # Focused on one user: only that pair.
    focused = paystream("reconcile", "--user", user, "--user", clean)
    assert focused.returncode == 1
    assert "1 MISMATCH(ES) among 2 balances" in focused.stdout
    assert focused.stdout.count(user) == 1


def test_balance_without_journal_is_a_mismatch(db) -> None:
    user = unique("ops-rec")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        cur.execute("INSERT INTO balances (user_id, asset, balance) VALUES (%s, 'ETH', 5)",
                    (user,))
    try:
        report = reconcile(db, users=[user])
    finally:
        with db.cursor() as cur:
            cur.execute("DELETE FROM balances WHERE user_id = %s", (user,))
    assert [(m.user_id, m.asset, m.balance, m.journal, m.difference, m.problem)
            for m in report.mismatches] == [
        (user, "ETH", Decimal(5), Decimal(0), Decimal(5), "journal_differs")]


def test_snapshot_is_repeatable_read_opened_by_statement(db) -> None:
    with snapshot(db) as cur:
        cur.execute("SHOW transaction_isolation")
        assert cur.fetchone()[0] == "repeatable read"
        cur.execute("SHOW transaction_read_only")
        assert cur.fetchone()[0] == "on"
    # Back to autocommit, no transaction left open.
    assert db.autocommit
    assert db.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE


def test_hot_path_catches_corruption_in_metric_and_log(db, ledger_db, corrupt) -> None:
    user = funded_user(db, ledger_db)
    other = funded_user(db, ledger_db)
    conn = ledger_db.connection()
    checks_before = REGISTRY.get_sample_value(
        "paystream_reconciliation_checks_total", {"scope": "hot_path"}) or 0
    reconciler = HotPathReconciler(interval_s=0)
    reconciler.note_touched([(user, "USDC"), (other, "USDC")])
    assert reconciler.maybe_check(conn) == []
    assert REGISTRY.get_sample_value("paystream_reconciliation_mismatches",
                                     {"scope": "hot_path"}) == 0

    corrupt(user)
    reconciler.note_touched([(user, "USDC")])
    with structlog.testing.capture_logs() as logs:
        found = reconciler.maybe_check(conn)
    assert [(m.user_id, m.balance, m.journal, m.difference) for m in found] == [
        (user, Decimal(8), Decimal(7), Decimal(1))]
    assert REGISTRY.get_sample_value("paystream_reconciliation_mismatches",
                                     {"scope": "hot_path"}) == 1
    critical = [e for e in logs if e["log_level"] == "critical"]
    assert critical == [{
        "event": "reconciliation_mismatch", "log_level": "critical", "scope": "hot_path",
        "book": "available", "user_id": user, "asset": "USDC", "problem": "journal_differs",
        "balance": "8.000000000000000000", "journal_sum": "7.000000000000000000",
        "difference": "1.000000000000000000"}]
    # The consumer's connection is left as the consumer needs it.
    assert conn.autocommit is False
    assert conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE

    # Not touched again, still re-checked: the gauge stays up until the money is fixed.
    # (Given the consumer's connection factory: it is called only when a check is due.)
    assert [m.user_id for m in reconciler.maybe_check(ledger_db.connection)] == [user]
    corrupt(user, by="-1")
    with structlog.testing.capture_logs() as logs:
        assert reconciler.maybe_check(conn) == []
    assert REGISTRY.get_sample_value("paystream_reconciliation_mismatches",
                                     {"scope": "hot_path"}) == 0
    assert [e["event"] for e in logs] == ["reconciliation_mismatch_resolved"]
    assert REGISTRY.get_sample_value("paystream_reconciliation_checks_total",
                                     {"scope": "hot_path"}) == checks_before + 4
    # Nothing new touched and nothing bad: the next check is not due.
    assert not reconciler.due()


def test_hot_path_refuses_to_run_inside_a_batch_transaction(db, ledger_db) -> None:
    user = funded_user(db, ledger_db)
    conn = ledger_db.connection()
    reconciler = HotPathReconciler(interval_s=0)
    reconciler.note_touched([(user, "USDC")])
    with conn.cursor() as cur:
        cur.execute("SELECT 1")  # psycopg2 opened a transaction: a batch in progress
    errors_before = REGISTRY.get_sample_value(
        "paystream_reconciliation_errors_total", {"scope": "hot_path"}) or 0
    assert reconciler.maybe_check(conn) == []
    assert REGISTRY.get_sample_value("paystream_reconciliation_errors_total",
                                     {"scope": "hot_path"}) == errors_before + 1
    # The open transaction was not touched.
    assert conn.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_INTRANS
    conn.rollback()


def test_hot_path_survives_an_unreachable_database(ledger_db) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there
    down = Database(f"postgresql://paystream:paystream@127.0.0.1:{port}/paystream")
    reconciler = HotPathReconciler(interval_s=0)
    reconciler.note_touched([("someone", "USDC")])
    errors_before = REGISTRY.get_sample_value(
        "paystream_reconciliation_errors_total", {"scope": "hot_path"}) or 0
    assert reconciler.maybe_check(down.connection) == []
    assert REGISTRY.get_sample_value("paystream_reconciliation_errors_total",
                                     {"scope": "hot_path"}) == errors_before + 1
    # The touched pair is kept for the next check.
    assert reconciler.due()


def test_balances_at_a_point_in_time_come_from_the_postings(db, ledger_db) -> None:
    """`paystream balances --user U --at T`: what the books said at T, not now."""
    user = unique("ops-at")
    deposit = record(user, unique("ev-dep"), "deposit", "10", "USDC", 0)
    later = record(user, unique("ev-wd"), "withdrawal", "3", "USDC", 1)
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        store_records(cur, [deposit, later])
    assert ledger_apply(ledger_db.connection(), [deposit]).outcomes["applied"] == 1
    with db.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        between = cur.fetchone()[0].isoformat()
    assert ledger_apply(ledger_db.connection(), [later]).outcomes["applied"] == 1

    then = paystream("balances", "--user", user, "--at", between)
    assert then.returncode == 0, then.stderr
    assert [line.split() for line in then.stdout.splitlines()][-1] == [user, "USDC", "10",
                                                                      "0", "0"]
    now = paystream("balances", "--user", user)
    assert [line.split() for line in now.stdout.splitlines()][-1] == [user, "USDC", "7",
                                                                     "0", "0"]
    before = paystream("balances", "--user", user, "--at", "2001-01-01T00:00:00Z")
    assert before.returncode == 0 and user not in before.stdout  # no postings yet
    # Refused with a reason: a moment without a user, and a moment that is not one.
    no_user = paystream("balances", "--at", between)
    assert no_user.returncode == 1 and "needs --user" in no_user.stderr
    garbage = paystream("balances", "--user", user, "--at", "yesterday")
    assert garbage.returncode == 2 and "not an ISO 8601 timestamp" in garbage.stderr
