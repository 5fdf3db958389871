"""Housekeeping against the real Postgres: what is purged, in batches, and why a replay
after the TTL still cannot move money twice."""

from __future__ import annotations

import json
import math
import re
import subprocess
import uuid
from decimal import Decimal
from pathlib import Path

import psycopg2
import pytest

from paystream.chaos.receiver import LOOPBACK_GUARD
from paystream.consume import ledger_handler
from paystream.consumers.commit import apply_with_isolation
from paystream.consumers.connection import Database
from paystream.consumers.ledger.reconcile import reconcile
from paystream.consumers.records import Origin, Record
from paystream.launch import paystream_argv
from paystream.notify import endpoints
from paystream.ops.housekeeping import purge_processed_events
from paystream.schema.db import database_url
from paystream.schema.idempotency import idempotency_key
from tests.support.consumers import store_records
from tests.support.ids import unique
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def insert_processed(cur, prefix: str, outcome: str, count: int, age_days: float) -> list[str]:
    """`count` processed_events rows with `outcome`, processed `age_days` ago; their keys."""
    keys = []
    for i in range(count):
        event_id = f"{prefix}-{outcome}-{age_days:g}-{i}"
        key = idempotency_key(event_id, "deposit")
        cur.execute("INSERT INTO processed_events (idempotency_key, event_id, event_type,"
                    " outcome, processed_at) VALUES (%s, %s, 'deposit', %s,"
                    " now() - make_interval(days => %s))",
                    (key, event_id, outcome, age_days))
        keys.append(key)
    return keys


def existing(cur, keys: list[str]) -> set[str]:
    cur.execute("SELECT idempotency_key FROM processed_events WHERE idempotency_key = ANY(%s)",
                (keys,))
    return {row[0] for row in cur.fetchall()}


def test_purges_only_old_final_entries_in_batches(db) -> None:
    prefix = unique("ops-hk")
    # Rows earlier runs left past the TTL would share the first batch with ours.
    purge_processed_events(db, ttl_days=14)
    with db.cursor() as cur:
        old_final = (insert_processed(cur, prefix, "applied", 25, 20)
                     + insert_processed(cur, prefix, "insufficient_funds", 5, 15)
                     + insert_processed(cur, prefix, "reorged", 3, 30))
        old_waiting = insert_processed(cur, prefix, "pending_finality", 4, 400)
        young = (insert_processed(cur, prefix, "applied", 6, 13)
                 + insert_processed(cur, prefix, "insufficient_funds", 2, 0))

        # One batch deletes exactly the batch size.
        one = purge_processed_events(db, ttl_days=14, batch_size=10, max_batches=1)
        assert (one.deleted, one.batches) == (10, 1)
        assert len(existing(cur, old_final)) == 33 - 10

        result = purge_processed_events(db, ttl_days=14, batch_size=10)
        # Other tests' old rows may go too; ours certainly do, 10 per transaction.
        assert result.deleted >= 23
        assert result.batches == math.ceil(result.deleted / 10)
        assert existing(cur, old_final) == set()
        assert existing(cur, old_waiting) == set(old_waiting)
        assert existing(cur, young) == set(young)

        # Older than any TTL, still never touched without a final outcome. (Not TTL 0:
        # the stack may be shared with a running ledger whose recent rows matter.)
        purge_processed_events(db, ttl_days=300, batch_size=1000)
        assert existing(cur, old_waiting) == set(old_waiting)
        cur.execute("DELETE FROM processed_events WHERE idempotency_key = ANY(%s)",
                    (old_waiting,))


def test_a_row_a_ledger_transaction_holds_is_skipped_not_waited_for(db) -> None:
    """SKIP LOCKED: housekeeping never waits on payments. Another transaction holds one
    old final row (as the ledger would, rewriting its outcome); the purge deletes the
    others at once and leaves that one for the next run."""
    purge_processed_events(db, ttl_days=14)
    with db.cursor() as cur:
        keys = insert_processed(cur, unique("ops-hk-lock"), "applied", 6, 20)
    holder = psycopg2.connect(db.dsn)
    try:
        with holder.cursor() as held:
            held.execute("SELECT 1 FROM processed_events WHERE idempotency_key = %s"
                         " FOR UPDATE", (keys[0],))
            with db.cursor() as cur:
                # Without SKIP LOCKED the purge would block on that row: fail, not hang.
                cur.execute("SET lock_timeout = '3s'")
                try:
                    result = purge_processed_events(db, ttl_days=14, batch_size=100)
                finally:
                    cur.execute("RESET lock_timeout")
                assert result.deleted >= 5
                assert existing(cur, keys) == {keys[0]}
        holder.rollback()
        assert purge_processed_events(db, ttl_days=14).deleted >= 1
        with db.cursor() as cur:
            assert existing(cur, keys) == set()
    finally:
        holder.close()


def test_cli_reports_what_it_deleted(db) -> None:
    prefix = unique("ops-hk-cli")
    with db.cursor() as cur:
        old = insert_processed(cur, prefix, "applied", 7, 40)
        dry = subprocess.run(paystream_argv("housekeeping", "--ttl-days", "30", "--dry-run"),
                             cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, dry.stderr
        assert "would be deleted" in dry.stdout
        assert existing(cur, old) == set(old)
        done = subprocess.run(paystream_argv("housekeeping", "--ttl-days", "30",
                                             "--batch-size", "3"), cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        # The claims' partitions first (0047), then the rows left in the others.
        lines = done.stdout.splitlines()
        assert lines[0].startswith("housekeeping: processed_events partitions of days older"
                                   " than 30 days dropped: ")
        assert lines[1].startswith("housekeeping: deleted ")
        assert int(lines[1].split()[2]) >= 7
        assert "of at most 3" in lines[1]
        # The attempts' partitions (0039): today's and 14 days ahead exist after a run.
        assert "notification_attempts partitions of days older than 30 days dropped:" in (
            done.stdout)
        cur.execute("SELECT to_regclass('notification_attempts_' || to_char("
                    " (now() AT TIME ZONE 'UTC')::date + 14, 'YYYYMMDD'))")
        assert cur.fetchone()[0] is not None
        cur.execute("SELECT to_regclass('processed_events_' || to_char("
                    " (now() AT TIME ZONE 'UTC')::date + 14, 'YYYYMMDD'))")
        assert cur.fetchone()[0] is not None
        assert existing(cur, old) == set()


def deposit(user: str, event_id: str, amount: str, event_type: str = "deposit") -> Record:
    value = {"event_id": event_id, "event_type": event_type, "user_id": user,
             "asset": "USDC", "amount": amount, "provider": "test"}
    return Record(Origin("paystream.payments", 0, 0), user.encode(),
                  json.dumps(value).encode(),
                  (("event_id", event_id.encode()), ("event_type", event_type.encode()),
                   ("trace_id", b"trace-ops-hk")), None)


def withdrawal(user: str, event_id: str, amount: str) -> Record:
    return deposit(user, event_id, amount, event_type="withdrawal")


def test_replay_after_ttl_purge_moves_no_money(db) -> None:
    """The idempotency row is gone after the TTL, and the event is applied: no
    redelivery explains a record of it any more (Kafka keeps records 7 days,
    housekeeping forgets outcomes after 14), so it is a dead letter, status_conflict,
    and no money moves. The journal's UNIQUE (source_event_id, event_type) would still
    stop a second credit."""
    user = unique("ops-hk-user")
    event_id = unique("ops-hk-ev")
    key = idempotency_key(event_id, "deposit")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        store_records(cur, [deposit(user, event_id, "10")])
    database = Database(application_name="paystream-test-ops")
    try:
        conn = database.connection()
    except psycopg2.OperationalError as exc:
        pytest.fail(f"Postgres is not reachable ({exc}); run `paystream stack up`")
    try:
        first = apply_with_isolation(conn, ledger_handler(), [deposit(user, event_id, "10")])
        conn.commit()
        assert first.outcomes["applied"] == 1

        with db.cursor() as cur:
            cur.execute("UPDATE processed_events SET processed_at = now() - interval '30 days'"
                        " WHERE idempotency_key = %s", (key,))
            purge_processed_events(db, ttl_days=14)
            cur.execute("SELECT count(*) FROM processed_events WHERE idempotency_key = %s",
                        (key,))
            assert cur.fetchone()[0] == 0

        # The same event arrives again (a group reset to an old offset, a forgery...).
        again = apply_with_isolation(conn, ledger_handler(), [deposit(user, event_id, "10")])
        conn.commit()
    finally:
        database.close()

    assert again.outcomes["applied"] == 0, again
    assert [d.reason for d in again.dead_letters] == ["status_conflict"], again
    assert "already applied" in again.dead_letters[0].detail
    with db.cursor() as cur:
        cur.execute("SELECT balance FROM balances WHERE user_id = %s AND asset = 'USDC'",
                    (user,))
        assert cur.fetchone()[0] == Decimal(10)
        cur.execute("SELECT count(*) FROM user_entries"
                    " WHERE book = 'available' AND source_event_id = %s",
                    (event_id,))
        assert cur.fetchone()[0] == 1
        cur.execute("SELECT status FROM event_status WHERE event_id = %s", (event_id,))
        assert cur.fetchone() == ("applied",)
    assert reconcile(db, users=[user]).clean


def test_a_rejection_replayed_after_the_ttl_stays_a_rejection(db):
    """A withdrawal rejected for insufficient funds, its key purged, replayed after the
    user got money: it must not turn into a success (the outcome is final), and it is
    a dead letter (status_conflict), not a silent duplicate."""
    user, withdrawal_id, deposit_id = unique("ttl-rej"), unique("wd"), unique("dep")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        store_records(cur, [withdrawal(user, withdrawal_id, "5"),
                            deposit(user, deposit_id, "100")])
    database = Database(application_name="paystream-test-ops")
    conn = database.connection()
    try:
        first = apply_with_isolation(conn, ledger_handler(),
                                     [withdrawal(user, withdrawal_id, "5")])
        conn.commit()
        assert first.outcomes["insufficient_funds"] == 1
        funded = apply_with_isolation(conn, ledger_handler(),
                                      [deposit(user, deposit_id, "100")])
        conn.commit()
        assert funded.outcomes["applied"] == 1
        with db.cursor() as cur:
            cur.execute("DELETE FROM processed_events WHERE idempotency_key = %s",
                        (idempotency_key(withdrawal_id, "withdrawal"),))
        again = apply_with_isolation(conn, ledger_handler(),
                                     [withdrawal(user, withdrawal_id, "5")])
        conn.commit()
    finally:
        database.close()
    assert again.outcomes["applied"] == 0 and again.outcomes["insufficient_funds"] == 0
    assert [d.reason for d in again.dead_letters] == ["status_conflict"], again
    with db.cursor() as cur:
        cur.execute("SELECT balance FROM balances WHERE user_id = %s", (user,))
        assert cur.fetchone()[0] == Decimal(100)
        cur.execute("SELECT status FROM event_status WHERE event_id = %s",
                    (withdrawal_id,))
        assert cur.fetchone() == ("rejected",)


def _intent(cur, age_days: float, states: list[str], attempts: int = 0,
            endpoints: list[str] | None = None) -> str:
    """An intent recorded `age_days` ago with one slot per state (on `endpoints`), each
    with `attempts` attempts; its id."""
    intent_id = "ntf_" + uuid.uuid4().hex
    cur.execute("INSERT INTO notification_intents (intent_id, type, user_id, created_at, data,"
                " recorded_at) VALUES (%s, 'deposit.credited', 'u', now(), '{}',"
                " now() - make_interval(days => %s))", (intent_id, age_days))
    for state, endpoint_id in zip(states, endpoints or [], strict=True):
        cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id, state)"
                    " VALUES (%s, %s, %s)", (intent_id, endpoint_id, state))
        for n in range(attempts):
            cur.execute("INSERT INTO notification_attempts (intent_id, endpoint_id, attempt,"
                        " started_at, latency_s, status_code) VALUES (%s, %s, %s, now(), 0.01,"
                        " 200)", (intent_id, endpoint_id, n + 1))
    return intent_id


def _rows(cur, table: str, ids: list[str]) -> int:
    cur.execute(f"SELECT count(*) FROM {table} WHERE intent_id = ANY(%s)", (ids,))
    return int(cur.fetchone()[0])


def test_notifications_done_and_past_their_ttl_go_with_their_slots_and_attempts(db) -> None:
    with db.cursor() as cur:
        ep1, _ = endpoints.add(cur, "http://127.0.0.1:9/hk-1", None, ["reminder.*"],
                                 guard=LOOPBACK_GUARD)
        ep2, _ = endpoints.add(cur, "http://127.0.0.1:9/hk-2", None, ["reminder.*"],
                                 guard=LOOPBACK_GUARD)
        delivered = _intent(cur, 40, ["delivered", "delivered"], 2, [ep1, ep2])
        failed = _intent(cur, 40, ["failed"], 6, [ep1])
        wanted_by_nobody = _intent(cur, 40, [])
        gone = [delivered, failed, wanted_by_nobody]
        half_done = _intent(cur, 40, ["delivered", "pending"], 1, [ep1, ep2])
        reminded = _intent(cur, 40, ["delivered"], 1, [ep1])
        cur.execute("INSERT INTO notification_reminders (reminder_key, intent_id)"
                    " VALUES (%s, %s)", (f"shortfall_open:{reminded}:1h", reminded))
        young = _intent(cur, 29, ["delivered"], 1, [ep1])
        kept = [half_done, reminded, young]

        dry = subprocess.run(paystream_argv("housekeeping", "--dry-run"), capture_output=True,
                             text=True, timeout=60, check=True).stdout
        found = re.search(r"dry run\): (\d+) notifications", dry)
        assert found and int(found.group(1)) >= 3, dry
        assert _rows(cur, "notification_intents", gone) == 3

        done = subprocess.run(paystream_argv("housekeeping", "--batch-size", "2"),
                              capture_output=True, text=True, timeout=60, check=True).stdout
        assert re.search(r"deleted \d+ notifications", done), done
        assert _rows(cur, "notification_intents", gone) == 0
        assert _rows(cur, "notification_deliveries", gone) == 0
        assert _rows(cur, "notification_attempts", gone) == 0
        assert _rows(cur, "notification_intents", kept) == 3
        assert _rows(cur, "notification_deliveries", kept) == 4
        assert _rows(cur, "notification_attempts", kept) == 4

        cur.execute("DELETE FROM notification_reminders WHERE intent_id = %s", (reminded,))
        for table in ("notification_attempts", "notification_deliveries",
                      "notification_intents"):
            cur.execute(f"DELETE FROM {table} WHERE intent_id = ANY(%s)", (kept,))
        # The endpoints' record first (endpoints add writes one: migration 0035).
        cur.execute("DELETE FROM endpoint_actions WHERE endpoint_id = ANY(%s)", ([ep1, ep2],))
        cur.execute("DELETE FROM notification_endpoints WHERE endpoint_id = ANY(%s)",
                    ([ep1, ep2],))


def test_a_slot_moved_back_to_pending_during_the_purge_keeps_its_intent(db) -> None:
    """The purge's snapshot saw every slot final; an operator's redeliver commits in
    between: the slot is not deleted, its intent's delete fails the statement (nothing
    of the batch goes), and the batch chosen again leaves that intent alone."""
    with db.cursor() as cur:
        ep, _ = endpoints.add(cur, "http://127.0.0.1:9/hk-race", None, ["reminder.*"],
                                 guard=LOOPBACK_GUARD)
        intent = _intent(cur, 40, ["delivered"], 1, [ep])
    other = psycopg2.connect(database_url("owner"))
    try:
        with other, other.cursor() as locker:
            # Hold the slot as a redeliver would, then move it back to pending.
            locker.execute("SELECT 1 FROM notification_deliveries WHERE intent_id = %s"
                           " FOR UPDATE", (intent,))
            purge = subprocess.Popen(paystream_argv("housekeeping", "--ttl-days", "1000"),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
            # The purge chose the batch while the slot was final and now waits on its lock.
            wait_until(lambda: _blocked_by(db, other.get_backend_pid()), 30,
                       what="the purge waiting on the slot's lock")
            locker.execute("UPDATE notification_deliveries SET state = 'pending'"
                           " WHERE intent_id = %s", (intent,))
        out, err = purge.communicate(timeout=60)
        assert purge.returncode == 0 and "deleted" in out, err
        with db.cursor() as cur:
            assert _rows(cur, "notification_intents", [intent]) == 1
            cur.execute("SELECT state FROM notification_deliveries WHERE intent_id = %s",
                        (intent,))
            assert cur.fetchall() == [("pending",)]
            assert _rows(cur, "notification_attempts", [intent]) == 1
            for table in ("notification_attempts", "notification_deliveries",
                          "notification_intents"):
                cur.execute(f"DELETE FROM {table} WHERE intent_id = %s", (intent,))
            cur.execute("DELETE FROM endpoint_actions WHERE endpoint_id = %s", (ep,))
            cur.execute("DELETE FROM notification_endpoints WHERE endpoint_id = %s", (ep,))
    finally:
        other.close()


def _blocked_by(db, pid: int) -> bool:
    """Some session waits on a lock `pid` holds (pg_stat_activity hides other roles'
    wait events from a non-superuser; pg_blocking_pids does not)."""
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    (pid,))
        return int(cur.fetchone()[0]) > 0


def test_refusals_not_retried_within_their_ttl_are_forgotten_in_batches(db) -> None:
    """A refused delivery last retried 40 days ago goes; one refused 40 days ago but
    retried yesterday stays (its retries keep it young), and so does yesterday's."""
    prefix = unique("ops-hk-refused")

    def refusal(event_id: str, first_days: float, last_days: float) -> None:
        cur.execute("INSERT INTO refused_deliveries (provider, event_id, code, user_id,"
                    " detail, trace_id, event, first_refused_at, last_refused_at)"
                    " VALUES ('payments', %s, 'unknown_user', 'nobody', 'no such user', 't',"
                    " '{}', now() - make_interval(days => %s),"
                    " now() - make_interval(days => %s))",
                    (event_id, first_days, last_days))

    with db.cursor() as cur:
        old = [f"{prefix}-old-{i}" for i in range(5)]
        for event_id in old:
            refusal(event_id, 40, 40)
        refusal(f"{prefix}-retried", 40, 1)
        refusal(f"{prefix}-new", 1, 1)
        done = subprocess.run(paystream_argv("housekeeping", "--refusals-ttl-days", "30",
                                             "--batch-size", "2"), cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        said = re.search(r"deleted (\d+) refused deliveries not retried older than 30 days",
                         done.stdout)
        assert said and int(said.group(1)) >= 5, done.stdout
        cur.execute("SELECT event_id FROM refused_deliveries WHERE event_id LIKE %s",
                    (prefix + "%",))
        assert {r[0] for r in cur.fetchall()} == {f"{prefix}-retried", f"{prefix}-new"}
