"""Each event's outcome is written once, with its final value (schema.processed_events),
against the real Postgres: what the WAL carries for processed_events is read back through
a temporary logical replication slot, so a provisional row corrected later would show.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, date
from decimal import Decimal
from typing import Any

import pytest

from paystream.consume import ledger_handler
from paystream.consumers.connection import Database
from paystream.consumers.handler import BatchResult
from paystream.consumers.records import Origin, Record
from paystream.schema import processed_events
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.idempotency import idempotency_key
from paystream.schema.processed_events import Outcome
from tests.support.consumers import store_records
from tests.support.ids import unique
from tests.support.ledger import ledger_apply

# The table is partitioned by day (0047): a change is logged under its partition's name.
CHANGE = re.compile(r"table public\.processed_events(?:_\w+)?: (INSERT|UPDATE|DELETE): .*?"
                    r"event_id\[text\]:'([^']*)'.*?outcome\[text\]:'([^']*)'")


def record(user: str, event_id: str, event_type: str, amount: str, offset: int = 0) -> Record:
    value = {"event_id": event_id, "event_type": event_type, "user_id": user,
             "asset": "USDC", "amount": amount, "provider": "test"}
    return Record(Origin("paystream.payments", 0, offset), user.encode(),
                  json.dumps(value).encode(),
                  (("event_id", event_id.encode()), ("event_type", event_type.encode()),
                   ("trace_id", b"trace-outcomes")), None)


@pytest.fixture
def wal() -> Iterator[Any]:
    """A function returning the changes to `table` whose text holds `marker`, since the
    fixture started, as test_decoding lines, read from a temporary logical slot (as the
    CDC role: the only one that may replicate)."""
    slot = unique("test_outcomes").replace("-", "_")
    db = connect(database_url("cdc"), application_name="paystream-test-wal")
    db.autocommit = True
    with db.cursor() as cur:
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding', true)",
                    (slot,))  # temporary: dropped with this session
    seen: list[str] = []

    def changes(table: str, marker: str) -> list[str]:
        with db.cursor() as cur:
            cur.execute("SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL)"
                        " WHERE data LIKE 'table public.%%'", (slot,))
            seen.extend(row[0] for row in cur.fetchall())
        # A partition's changes are logged under its name (`table`_<day>, _legacy).
        names = (f"table public.{table}:", f"table public.{table}_")
        return [line for line in seen if line.startswith(names) and marker in line]

    yield changes
    db.close()


def outcome_changes(lines: list[str]) -> list[tuple[str, str, str]]:
    """(operation, event_id, outcome) of processed_events change lines."""
    found = [CHANGE.match(line) for line in lines]
    return [(m[1], m[2], m[3]) for m in found if m is not None]


def test_each_outcome_is_inserted_once_with_its_final_value_and_a_replay_adds_none(
        db: Connection, ledger_db: Database, wal: Any) -> None:
    rich, poor = unique("out-rich"), unique("out-poor")
    prefix = unique("out-ev")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s), (%s)", (rich, poor))
    batch = [record(rich, f"{prefix}-dep", "deposit", "10", 0),
             record(rich, f"{prefix}-big", "withdrawal", "50", 1),  # insufficient
             record(rich, f"{prefix}-ok", "withdrawal", "4", 2),
             record(poor, f"{prefix}-none", "withdrawal", "1", 3)]  # no balance row at all
    with db.cursor() as cur:
        store_records(cur, batch)
    first = ledger_apply(ledger_db.connection(), batch)
    assert (first.outcomes["applied"], first.outcomes["insufficient_funds"]) == (2, 2)

    again = ledger_apply(ledger_db.connection(), batch)  # a redelivered batch
    assert again.outcomes["duplicate"] == 4 and again.outcomes["applied"] == 0

    assert sorted(outcome_changes(wal("processed_events", prefix))) == sorted([
        ("INSERT", f"{prefix}-dep", "applied"),
        ("INSERT", f"{prefix}-big", "insufficient_funds"),
        ("INSERT", f"{prefix}-ok", "applied"),
        ("INSERT", f"{prefix}-none", "insufficient_funds"),
    ])  # no UPDATE: nothing provisional was corrected; no second INSERT on the replay
    with db.cursor() as cur:
        # Each claim is filed under the UTC day its event's row was received on.
        cur.execute("SELECT p.event_day, e.received_at FROM processed_events p"
                    " JOIN payment_events e USING (event_id) WHERE p.event_id LIKE %s",
                    (f"{prefix}-%",))
        filed = cur.fetchall()
        assert len(filed) == 4
        assert all(day == at.astimezone(UTC).date() for day, at in filed), filed
        cur.execute("SELECT balance FROM balances WHERE user_id = %s", (rich,))
        assert cur.fetchall() == [(Decimal(6),)]
        cur.execute("SELECT count(*) FROM balances WHERE user_id = %s", (poor,))
        assert cur.fetchone() == (0,)


def test_two_appliers_of_one_event_commit_one_outcome(db: Connection, wal: Any) -> None:
    """A rebalance lets two processes hold one batch for a moment. A debit of an asset
    the user never held has no balance row to lock, so both plan it: the outcome's
    INSERT is the claim, the second waits for the first, finds the key taken and drops
    the event as a duplicate. One outcome, one notification, never two."""
    user, event_id = unique("out-race"), unique("out-race-ev")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    batch = [record(user, event_id, "withdrawal", "1")]
    with db.cursor() as cur:
        store_records(cur, batch)
    first, second = (Database(application_name="paystream-test-race-a"),
                     Database(application_name="paystream-test-race-b"))
    try:
        winner, loser = first.connection(), second.connection()
        with winner.cursor() as cur:
            won = ledger_handler().apply(cur, batch)  # applied, not committed yet
        assert won.outcomes["insufficient_funds"] == 1
        with loser.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            loser_pid = cur.fetchone()[0]
        lost: list[BatchResult | BaseException] = []

        def lose() -> None:
            try:
                lost.append(ledger_apply(loser, batch))
            except BaseException as exc:
                lost.append(exc)

        thread = threading.Thread(target=lose)
        thread.start()
        _wait_for_lock_wait(db, loser_pid)  # the loser waits on the winner's key
        winner.commit()
        thread.join(30)
        assert not thread.is_alive()
        assert len(lost) == 1 and isinstance(lost[0], BatchResult), lost
        assert lost[0].outcomes["duplicate"] == 1 and not lost[0].dead_letters
        assert lost[0].outcomes["insufficient_funds"] == 0
    finally:
        first.close()
        second.close()
    with db.cursor() as cur:
        cur.execute("SELECT outcome FROM processed_events WHERE idempotency_key = %s",
                    (idempotency_key(event_id, "withdrawal"),))
        assert cur.fetchall() == [("insufficient_funds",)]
    assert outcome_changes(wal("processed_events", event_id)) == [
        ("INSERT", event_id, "insufficient_funds")]  # the loser's insert was not kept
    notices = [line for line in wal("outbox", event_id) if ": INSERT:" in line]
    assert len(notices) == 1 and "withdrawal.rejected" in notices[0]  # one notification


def _wait_for_lock_wait(db: Connection, pid: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with db.cursor() as cur:
            # pg_locks, not pg_stat_activity: the owner may not see another role's
            # wait events (the ledger's connection is paystream_ledger's).
            cur.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s"
                        " AND NOT granted)", (pid,))
            row = cur.fetchone()
        if row is not None and row[0]:
            return
        time.sleep(0.02)
    pytest.fail(f"backend {pid} never waited on a lock")


@pytest.mark.parametrize("size", [2, 500])
def test_a_claim_with_one_key_taken_keeps_nothing_then_succeeds_without_it(
        ledger_db: Database, size: int) -> None:
    """record() is all or nothing: the COPY fails on the taken key, and the statement
    that names it keeps nothing either (back to the savepoint). Each claim keeps the
    day it was given, or none, by either statement."""
    prefix = unique("out-claim")
    rows = [(idempotency_key(f"{prefix}-{n}", "deposit"), f"{prefix}-{n}", "deposit",
             Outcome.APPLIED, date(2026, 1 + n % 12, 1 + n % 28) if n % 3 else None)
            for n in range(size)]
    conn = ledger_db.connection()
    try:
        with conn.cursor() as cur:
            assert processed_events.record(cur, rows[-1:]) == set()  # taken first
            assert processed_events.record(cur, rows) == {rows[-1][0]}
            cur.execute("SELECT count(*) FROM processed_events WHERE event_id LIKE %s",
                        (f"{prefix}-%",))
            assert cur.fetchone() == (1,)  # nothing of the refused claim stayed
            assert processed_events.record(cur, rows[:-1]) == set()
            cur.execute("SELECT idempotency_key, event_day FROM processed_events"
                        " WHERE event_id LIKE %s", (f"{prefix}-%",))
            assert dict(cur.fetchall()) == {row[0]: row[4] for row in rows}
    finally:
        conn.rollback()  # test rows only: leave nothing behind
