"""notification_attempts partitioned by day (migrations 0037-0039), on scratch databases
of the test stack's Postgres: the attempts recorded before the migration stay readable
(the old table is the first partition) and ids go on above theirs; inserts across a
day's boundary land in each day's partition and one beyond every partition lands in the
default one instead of failing; housekeeping's maintenance, as the operator, drops the
expired days whole, keeps the young ones and creates the days ahead."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock

import pytest

from paystream.notify import operator
from paystream.ops.housekeeping import maintain_attempt_partitions
from paystream.schema.db import Connection, Cursor, PostgresAddress, connect
from paystream.schema.migrate import apply_pending
from tests.support.migrations import apply_under_writes, database_at
from tests.support.recording import analyzed, nodes

INTENT = "ntf_" + "a" * 32
ENDPOINT = "ep_" + "b" * 24
# An intent, its endpoint and delivery, and two attempts, as 0032's schema holds them.
BEFORE = f"""
INSERT INTO notification_endpoints (endpoint_id, url, secret)
    VALUES ('{ENDPOINT}', 'http://example.test/hook', '\\x{'00' * 32}');
INSERT INTO notification_intents (intent_id, type, user_id, created_at, data)
    VALUES ('{INTENT}', 'deposit.credited', 'u1', now(), '{{}}');
INSERT INTO notification_deliveries (intent_id, endpoint_id, state)
    VALUES ('{INTENT}', '{ENDPOINT}', 'failed');
INSERT INTO notification_attempts (intent_id, endpoint_id, attempt, started_at, latency_s,
                                   status_code)
    VALUES ('{INTENT}', '{ENDPOINT}', 1, now(), 0.1, 500),
           ('{INTENT}', '{ENDPOINT}', 2, now(), 0.1, 500);
"""


# The table as a busy notifier leaves it: enough rows that a scan under the swap's
# exclusive lock (an ATTACH without 0038's validated bound) would show in the writers' wait.
FILL = f"""
INSERT INTO notification_attempts (intent_id, endpoint_id, attempt, started_at, latency_s,
                                   status_code)
SELECT '{INTENT}', '{ENDPOINT}', n, now(), 0.1, 500 FROM generate_series(3, 300002) n;
"""


@pytest.fixture
def migrated() -> Iterator[PostgresAddress]:
    """A database at 0032 holding two attempts, then migrated to the newest schema."""
    with database_at("0032_statements", BEFORE) as address:
        with closing(connect(address.dsn("owner"))) as owner:
            assert "0039_notification_attempts_by_day" in apply_pending(owner)
        yield address


def test_the_migration_applies_while_the_notifier_inserts_attempts() -> None:
    """0037-0039 (and the later ones) under a writer inserting an attempt every 5 ms as
    the notifier does (by the table's name, no id): no insert fails, none waits long,
    every one is kept."""
    def attempt(cur: Cursor, _: int) -> None:
        # the notifier's columns (notify/store.py), 0032's too
        cur.execute("INSERT INTO notification_attempts (intent_id, endpoint_id, attempt,"
                    " started_at, latency_s, status_code) VALUES (%s, %s, 1, now(), 0.1, 200)",
                    (INTENT, ENDPOINT))

    with database_at("0032_statements", BEFORE + FILL) as address:
        seen = apply_under_writes(address, attempt)
        assert "0039_notification_attempts_by_day" in seen.applied
        assert not seen.errors, seen.errors[:3]
        assert max(seen.waits) < 0.5, max(seen.waits)
        with closing(connect(address.dsn("owner"))) as owner, owner.cursor() as cur:
            cur.execute("SELECT count(*) FROM notification_attempts")
            assert cur.fetchone()[0] == 300002 + len(seen.waits)


def _insert(cur, recorded_at: datetime | None = None) -> tuple[int, str]:
    """One attempt (recorded now, or at `recorded_at`); its id and partition."""
    cur.execute("INSERT INTO notification_attempts (intent_id, endpoint_id, attempt,"
                " started_at, latency_s, status_code, recorded_at)"
                " VALUES (%s, %s, 3, now(), 0.1, 200, coalesce(%s, now()))"
                " RETURNING id, tableoid::regclass::text", (INTENT, ENDPOINT, recorded_at))
    return cur.fetchone()


def _midnight(day: date) -> datetime:
    return datetime.combine(day, clock(), UTC)


def test_old_attempts_stay_readable_and_inserts_cross_day_boundaries(migrated) -> None:
    with closing(connect(migrated.dsn("owner"))) as owner, owner.cursor() as cur:
        cur.execute("SELECT id, tableoid::regclass::text FROM notification_attempts"
                    " WHERE intent_id = %s ORDER BY id", (INTENT,))
        old = cur.fetchall()
        assert [p for _, p in old] == ["notification_attempts_legacy"] * 2
        # As the notifier writes them: no id, no recorded_at.
        new_id, _ = _insert(cur)
        assert new_id > max(i for i, _ in old)
        day = datetime.now(UTC).date() + timedelta(days=3)
        last_instant = _midnight(day + timedelta(days=1)) - timedelta(microseconds=1)
        assert _insert(cur, last_instant)[1] == f"notification_attempts_{day:%Y%m%d}"
        next_day = day + timedelta(days=1)
        assert (_insert(cur, _midnight(next_day))[1]
                == f"notification_attempts_{next_day:%Y%m%d}")
        # Beyond the days made ahead (14): kept in the default partition, not refused.
        far = _midnight(day + timedelta(days=60))
        assert _insert(cur, far)[1] == "notification_attempts_default"
        owner.commit()


def _drop_legacy_and_make_past_days(owner: Connection, ages: list[int]) -> None:
    """What a year of runs leaves: the legacy partition gone, one partition per past
    day of `ages` (days ago), one attempt in each."""
    today = datetime.now(UTC).date()
    with owner.cursor() as cur:
        cur.execute("DROP TABLE notification_attempts_legacy")
        for age in ages:
            day = today - timedelta(days=age)
            cur.execute(f"CREATE TABLE notification_attempts_{day:%Y%m%d}"
                        " PARTITION OF notification_attempts FOR VALUES FROM (%s) TO (%s)",
                        (_midnight(day), _midnight(day + timedelta(days=1))))
            _insert(cur, _midnight(day) + timedelta(hours=12))
    owner.commit()


def test_housekeeping_drops_expired_days_whole_and_keeps_the_young(migrated) -> None:
    with closing(connect(migrated.dsn("owner"))) as owner:
        _drop_legacy_and_make_past_days(owner, [40, 31, 29])
        with owner.cursor() as cur:
            # A day no partition covers (runs were missed): in the default partition.
            assert _insert(cur, datetime.now(UTC) - timedelta(days=50))[1] == (
                "notification_attempts_default")
        owner.commit()
    today = datetime.now(UTC).date()
    with closing(connect(migrated.dsn("ops"))) as ops:
        ops.autocommit = True
        dry = maintain_attempt_partitions(ops, ttl_days=30, dry_run=True)
        assert dry.dropped == 2
        started = time.monotonic()
        done = maintain_attempt_partitions(ops, ttl_days=30, ahead_days=20)
        took = time.monotonic() - started
        assert (done.dropped, done.deleted, done.skipped) == (2, 1, 0)
        assert done.created == 20 - 14  # 0039 made today and 14 days ahead
        assert took < 1.0, took
        with ops.cursor() as cur:
            cur.execute("SELECT tableoid::regclass::text, count(*) FROM notification_attempts"
                        " GROUP BY 1 ORDER BY 1")
            assert cur.fetchall() == [
                (f"notification_attempts_{today - timedelta(days=29):%Y%m%d}", 1)]
            cur.execute("SELECT to_regclass(%s)",
                        (f"notification_attempts_{today + timedelta(days=20):%Y%m%d}",))
            assert cur.fetchone()[0] is not None
        # Run again: nothing left to do.
        again = maintain_attempt_partitions(ops, ttl_days=30, ahead_days=20)
        assert (again.created, again.dropped, again.deleted) == (0, 0, 0)


def test_an_intents_attempts_are_read_by_index_in_every_partition(migrated) -> None:
    """`notifications show` (notify.operator.show) over several days of other intents'
    attempts: each partition is read by its index, none scanned whole (the indexes of
    partitions housekeeping makes later are the parent's, inherited)."""
    with closing(connect(migrated.dsn("owner"))) as owner:
        today = datetime.now(UTC).date()
        with owner.cursor() as cur:
            for age in range(4):  # the legacy partition and three days ahead
                cur.execute(
                    "INSERT INTO notification_attempts (intent_id, endpoint_id, attempt,"
                    " started_at, latency_s, status_code, recorded_at) SELECT %s, %s, n,"
                    " now(), 0.1, 200, %s FROM generate_series(1, 2000) n",
                    (INTENT, ENDPOINT, _midnight(today + timedelta(days=age)) + timedelta(
                        hours=1)))
            other = "ntf_" + "c" * 32
            cur.execute("INSERT INTO notification_intents (intent_id, type, user_id,"
                        " created_at, data) VALUES (%s, 'deposit.credited', 'u1', now(),"
                        " '{}')", (other,))
            cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id, state)"
                        " VALUES (%s, %s, 'delivered')", (other, ENDPOINT))
            cur.execute("INSERT INTO notification_attempts (intent_id, endpoint_id, attempt,"
                        " started_at, latency_s, status_code, recorded_at) VALUES"
                        " (%s, %s, 1, now(), 0.1, 200, %s)",
                        (other, ENDPOINT, _midnight(today + timedelta(days=2))))
            cur.execute("ANALYZE notification_attempts")
            _, _, attempts = operator.show(cur, other)
            assert len(attempts) == 1
            statement = cur.query
            # In the transaction that wrote the rows: its ROLLBACK takes them back too.
            plan = analyzed(cur, statement, seqscan=False)
    scans = [n for n in nodes(plan)
             if n.get("Relation Name", "").startswith("notification_attempts")]
    assert len({n["Relation Name"] for n in scans}) >= 4, scans
    assert all(n["Node Type"] != "Seq Scan" and not n.get("Rows Removed by Filter")
               for n in scans), [(n["Relation Name"], n["Node Type"]) for n in scans]
