"""processed_events partitioned by its events' day (migrations 0045-0047): the claims
made before stay in the legacy partition and keep their key; the ledger's claims cross
a day's boundary into each day's partition and a redelivery still conflicts there;
housekeeping, as the operator, drops the expired days whole but keeps one whose claim
still waits, and makes the days ahead; every read by key probes each partition's index.
The migration itself is applied while a writer claims as the previous release does."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg2.extensions
import pytest
from psycopg2.extras import execute_values

from paystream.consume import ledger_handler
from paystream.consumers.commit import apply_with_isolation
from paystream.consumers.records import Origin, Record
from paystream.ops.housekeeping import maintain_claim_partitions, purge_processed_events
from paystream.schema import processed_events, stored_events
from paystream.schema.db import Connection, PostgresAddress, connect
from paystream.schema.idempotency import idempotency_key
from paystream.schema.migrate import apply_pending
from paystream.schema.processed_events import Outcome
from tests.support.consumers import store_records
from tests.support.ids import unique
from tests.support.migrations import apply_under_writes, database_at
from tests.support.recording import SENT, Recording, analyzed, nodes

CLAIM = ("INSERT INTO processed_events (idempotency_key, event_id, event_type, outcome,"
         " processed_at, event_day) VALUES (%s, %s, 'deposit', %s, %s, %s)"
         " RETURNING tableoid::regclass::text")
# The claims as the ledger left them at 0044: keys, an outcome, and no day for most.
FILL = """
INSERT INTO processed_events (idempotency_key, event_id, event_type, outcome, event_day)
SELECT md5(n::text) || md5((-n)::text), 'evt_fill_' || n, 'deposit', 'applied',
       CASE WHEN n % 2 = 0 THEN (now() AT TIME ZONE 'UTC')::date END
  FROM generate_series(1, 300000) n;
"""


def _today() -> date:
    return datetime.now(UTC).date()


def _claim(cur: Any, event_id: str, day: date | None, outcome: str = "applied",
           processed_at: datetime | None = None) -> str:
    """One claim of `event_id` (a deposit) filed under `day`; the partition it landed in."""
    cur.execute(CLAIM, (idempotency_key(event_id, "deposit"), event_id, outcome,
                        processed_at or datetime.now(UTC), day))
    return cur.fetchone()[0]


def test_the_migration_applies_while_the_previous_ledger_claims() -> None:
    """0045-0047 on 300,000 claims under a writer claiming every 5 ms as 0044's ledger
    does (by the table's name, its event's day): no claim fails, none waits long, every
    one is kept, and the claims made before are the legacy partition's."""
    with database_at("0044_claims_event_day", FILL) as address:
        seen = apply_under_writes(address, lambda cur, n: _claim(cur, f"evt_live_{n}",
                                                                  _today()))
        assert "0047_claims_by_day" in seen.applied
        assert not seen.errors, seen.errors[:3]
        assert max(seen.waits) < 0.5, max(seen.waits)
        with closing(connect(address.dsn("owner"))) as owner, owner.cursor() as cur:
            cur.execute("SELECT tableoid::regclass::text, count(*) FROM processed_events"
                        " GROUP BY 1")
            # Today's claims are before 0045's bound (midnight after tomorrow).
            assert cur.fetchall() == [("processed_events_legacy", 300000 + len(seen.waits))]


@pytest.fixture
def migrated() -> Iterator[PostgresAddress]:
    """A database at the newest schema holding one claim made at 0044, with no day."""
    with database_at("0044_claims_event_day") as address:
        with closing(connect(address.dsn("owner"))) as owner:
            with owner.cursor() as cur:
                _claim(cur, "evt_before", None)
            owner.commit()
            assert "0047_claims_by_day" in apply_pending(owner)
        yield address


def test_a_claim_conflicts_in_its_days_partition_and_days_cross_into_the_next(
        migrated) -> None:
    day = _today() + timedelta(days=5)  # made ahead by 0047
    with closing(connect(migrated.dsn("owner"))) as owner:
        owner.autocommit = True
        with owner.cursor() as cur:
            # The claim made before keeps its key: a second claim of it still conflicts.
            with pytest.raises(psycopg2.errors.ExclusionViolation):
                _claim(cur, "evt_before", None)
            assert _claim(cur, "evt_d", day) == f"processed_events_{day:%Y%m%d}"
            after = day + timedelta(days=1)
            assert _claim(cur, "evt_d1", after) == f"processed_events_{after:%Y%m%d}"
            with pytest.raises(psycopg2.errors.ExclusionViolation):
                _claim(cur, "evt_d", day)
            # Beyond the days made ahead (14): kept in the default partition, not refused,
            # and still claimed once.
            far = day + timedelta(days=60)
            assert _claim(cur, "evt_far", far) == "processed_events_default"
            with pytest.raises(psycopg2.errors.ExclusionViolation):
                _claim(cur, "evt_far", far)
            # What the ledger does on a conflict: the taken key named, nothing inserted.
            rows = [(idempotency_key(e, "deposit"), e, "deposit", Outcome.APPLIED, d)
                    for e, d in (("evt_d", day), ("evt_new", day))]
            owner.autocommit = False
            assert processed_events.record(cur, rows) == {rows[0][0]}
            owner.rollback()


def _past(owner: Connection, ages: list[int], per_day: int = 1) -> None:
    """What a year of runs leaves: the legacy partition gone, a partition for each day
    from the oldest of `ages` (days ago) to today, `per_day` final claims in each day of
    `ages`."""
    with owner.cursor() as cur:
        cur.execute("DROP TABLE processed_events_legacy")
        cur.execute("SELECT created FROM processed_events_partitions(0, NULL, %s)",
                    (max(ages),))
        assert cur.fetchone()[0] == max(ages) + 1
        for age in ages:
            day = _today() - timedelta(days=age)
            noon = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=12)
            events = [f"evt_{day:%Y%m%d}_{n}" for n in range(per_day)]
            execute_values(cur, "INSERT INTO processed_events (idempotency_key, event_id,"
                           " event_type, outcome, processed_at, event_day) VALUES %s",
                           [(idempotency_key(e, "deposit"), e, "deposit", "applied", noon, day)
                            for e in events], page_size=1000)
    owner.commit()


def test_housekeeping_drops_expired_days_whole_but_keeps_one_that_waits(migrated) -> None:
    today = _today()
    with closing(connect(migrated.dsn("owner"))) as owner:
        _past(owner, [20, 16, 15, 13])
        with owner.cursor() as cur:
            # Day -15 holds a deposit still waiting on its chain's finality.
            waiting = _claim(cur, "evt_waits", today - timedelta(days=15), "pending_finality")
            assert waiting == f"processed_events_{today - timedelta(days=15):%Y%m%d}"
        owner.commit()
    with closing(connect(migrated.dsn("ops"))) as ops:
        ops.autocommit = True
        # Days 20 to 15 ago are past the TTL (a day's last instant is 14 days old).
        dry = maintain_claim_partitions(ops, ttl_days=14, dry_run=True)
        assert (dry.dropped, dry.created) == (6, 0)
        started = time.monotonic()
        done = maintain_claim_partitions(ops, ttl_days=14, ahead_days=20)
        took = time.monotonic() - started
        assert (done.dropped, done.kept, done.skipped) == (5, 1, 0)
        # 0047 made up to 14 days ahead, from its bound (after tomorrow) on: tomorrow was
        # the legacy partition's, now gone, and _past made up to today.
        assert done.created == (20 - 14) + 1
        assert took < 1.0, took
        with ops.cursor() as cur:
            cur.execute("SELECT tableoid::regclass::text, count(*) FROM processed_events"
                        " GROUP BY 1 ORDER BY 1")
            assert cur.fetchall() == [
                (f"processed_events_{today - timedelta(days=15):%Y%m%d}", 2),
                (f"processed_events_{today - timedelta(days=13):%Y%m%d}", 1)]
            cur.execute("SELECT to_regclass(%s)",
                        (f"processed_events_{today + timedelta(days=20):%Y%m%d}",))
            assert cur.fetchone()[0] is not None
        # A claim of a dropped day (a DLQ replay of an old event) lands in the default
        # partition; expired, it is forgotten by rows.
        with ops.cursor() as cur, closing(connect(migrated.dsn("owner"))) as owner:
            with owner.cursor() as owner_cur:
                late = _claim(owner_cur, "evt_late", today - timedelta(days=20),
                              processed_at=datetime.now(UTC) - timedelta(days=15))
            owner.commit()
            assert late == "processed_events_default"
            assert purge_processed_events(ops, ttl_days=14).deleted == 1
        # The waiting claim settles: its day goes on the next run; nothing else to do.
        with closing(connect(migrated.dsn("owner"))) as owner, owner.cursor() as cur:
            owner.autocommit = True
            cur.execute("UPDATE processed_events SET outcome = 'applied'"
                        " WHERE event_id = 'evt_waits'")
        again = maintain_claim_partitions(ops, ttl_days=14, ahead_days=20)
        assert (again.created, again.dropped, again.kept, again.skipped) == (0, 1, 0, 0)


def test_reads_by_key_probe_each_partitions_index_at_thirty_days(migrated) -> None:
    """Every read of a claim by its key, as the code sends it (the ledger's check of a
    redelivery, a settlement, the DLQ replay's refusal; the API's is test_api.py's), over
    30 past days of 2,000 claims each: each partition is read by its key index, none
    scanned, and no claim but the one asked for is read."""
    with closing(connect(migrated.dsn("owner"))) as owner:
        _past(owner, list(range(30, 0, -1)), per_day=2000)
        with owner.cursor() as cur:
            cur.execute("ANALYZE processed_events")
        day = _today() - timedelta(days=7)
        key = idempotency_key(f"evt_{day:%Y%m%d}_7", "deposit")
        owner.cursor_factory = Recording
        SENT.clear()
        with owner.cursor() as cur:
            assert processed_events.outcome_of(cur, f"evt_{day:%Y%m%d}_7", "deposit") == (
                "applied")
            assert processed_events.settle(cur, [key], Outcome.PENDING_FINALITY,
                                           Outcome.APPLIED) == 0
            # The event is not stored here: the plan of the probe is what is checked.
            stored_events.suspects(cur, [(f"evt_{day:%Y%m%d}_7", key, "h")])
        owner.rollback()
        owner.cursor_factory = psycopg2.extensions.cursor
        with owner.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_inherits"
                        " WHERE inhparent = 'processed_events'::regclass")
            partitions = cur.fetchone()[0]
            assert partitions >= 30 + 14
            # The days ahead are empty: a scan of nothing is what the planner rightly picks.
            cur.execute("SELECT c.relname FROM pg_inherits i JOIN pg_class c"
                        " ON c.oid = i.inhrelid WHERE i.inhparent = 'processed_events'::regclass"
                        " AND c.reltuples > 0")
            filled = {row[0] for row in cur.fetchall()}
            assert len(filled) == 30
            for statement in SENT:
                scans = [n for n in nodes(analyzed(cur, statement))  # the UPDATE's too
                         if n.get("Relation Name", "").startswith("processed_events")
                         and n["Node Type"] != "ModifyTable"]
                why = [(n["Relation Name"], n["Node Type"]) for n in scans]
                assert len(scans) == partitions, why
                assert all(n["Node Type"] in ("Index Scan", "Bitmap Heap Scan")
                           for n in scans if n["Relation Name"] in filled), why
                assert sum(n.get("Actual Rows", 0) + n.get("Rows Removed by Index Recheck", 0)
                           for n in scans) <= 1, why


def deposit(user: str, event_id: str, amount: str) -> Record:
    value = {"event_id": event_id, "event_type": "deposit", "user_id": user,
             "asset": "USDC", "amount": amount, "provider": "test"}
    return Record(Origin("paystream.payments", 0, 0), user.encode(),
                  json.dumps(value).encode(),
                  (("event_id", event_id.encode()), ("event_type", b"deposit"),
                   ("trace_id", b"trace-claim-days")), None)


def test_the_ledger_files_each_claim_under_its_events_day_across_midnight(
        db, ledger_db) -> None:
    """Two deposits received a microsecond apart across midnight UTC (of a day the
    migration made ahead): the ledger's claims land in each one's day, and a redelivery
    of the batch is a duplicate of each, no money moved twice."""
    user = unique("claim-day-user")
    first, second = unique("claim-day-a"), unique("claim-day-b")
    midnight = datetime.combine(_today() + timedelta(days=6), datetime.min.time(), UTC)
    batch = [deposit(user, first, "1.5"), deposit(user, second, "2.25")]
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        store_records(cur, batch)
        cur.execute("UPDATE payment_events SET received_at = CASE event_id WHEN %s THEN %s"
                    " ELSE %s END WHERE event_id IN (%s, %s)",
                    (first, midnight - timedelta(microseconds=1), midnight, first, second))
    conn = ledger_db.connection()
    applied = apply_with_isolation(conn, ledger_handler(), batch)
    conn.commit()
    assert applied.outcomes["applied"] == 2, applied
    again = apply_with_isolation(conn, ledger_handler(), batch)
    conn.commit()
    assert (again.outcomes["applied"], again.outcomes["duplicate"]) == (0, 2), again
    with db.cursor() as cur:
        cur.execute("SELECT event_id, event_day, tableoid::regclass::text"
                    " FROM processed_events WHERE idempotency_key = ANY(%s) ORDER BY 1",
                    ([idempotency_key(first, "deposit"), idempotency_key(second, "deposit")],))
        before, after = midnight.date() - timedelta(days=1), midnight.date()
        assert sorted(cur.fetchall()) == sorted([
            (first, before, f"processed_events_{before:%Y%m%d}"),
            (second, after, f"processed_events_{after:%Y%m%d}")])
        cur.execute("SELECT balance FROM balances WHERE user_id = %s AND asset = 'USDC'",
                    (user,))
        assert cur.fetchone()[0] == Decimal("3.75")
