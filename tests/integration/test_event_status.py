"""An event's status lives in event_status (migration 0030); payment_events is only
inserted. The outbox write inserts both rows in one statement, as the roles that write
events; the ledger moves the status without rewriting the event's row; the migration
carries every status of a database that had them in payment_events.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from decimal import Decimal

import psycopg2.errors
import pytest

from paystream.schema.db import Connection, PostgresAddress, connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from paystream.schema.migrate import apply_pending
from paystream.schema.outbox import WriteOutcome, write_event, write_events
from tests.support.consumers import create_users, record_of, wire_message
from tests.support.ids import unique
from tests.support.ledger import ledger_apply
from tests.support.migrations import database_at


def _rows(conn: Connection, sql: str, params: tuple[object, ...] = ()) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _deposit(user: str, amount: str = "10") -> PaymentEvent:
    return PaymentEvent(unique("status-ev"), EventType.DEPOSIT, user, "USDC", Decimal(amount),
                        "test")


def test_the_outbox_write_records_each_new_event_with_its_received_status(db) -> None:
    """As the ingest's role (INSERT on event_status, nothing more): one event, a batch, a
    duplicate and a conflict; each new event has exactly one status row, `received`
    since the moment it was received."""
    user = unique("status-user")
    with db.cursor() as cur:
        create_users(cur, [user])
    one, first, second = _deposit(user), _deposit(user), _deposit(user)
    conflict = replace(first, amount=Decimal(99))
    ingest = connect(database_url("ingest"))
    try:
        with ingest.cursor() as cur:
            assert write_event(cur, one, "t-one") is WriteOutcome.ACCEPTED
            assert write_events(cur, [(first, "t1"), (second, "t2"), (first, "t1"),
                                      (conflict, "t3")]) == [
                WriteOutcome.ACCEPTED, WriteOutcome.ACCEPTED, WriteOutcome.DUPLICATE,
                WriteOutcome.CONFLICT]
            assert write_event(cur, one, "t-one") is WriteOutcome.DUPLICATE
        ingest.commit()
    finally:
        ingest.close()
    ids = [one.event_id, first.event_id, second.event_id]
    assert sorted(_rows(db, "SELECT s.event_id, s.status, s.status_changed_at = p.received_at"
                            " FROM event_status s JOIN payment_events p USING (event_id)"
                            " WHERE s.event_id = ANY(%s)", (ids,))) == \
        sorted((e, "received", True) for e in ids)


def test_an_event_and_its_status_row_are_written_together_or_not_at_all(db) -> None:
    """A status row that cannot be written fails the write: no event is accepted without
    its status. (A CHECK added for the test, in a transaction rolled back, refuses it.)"""
    user = unique("status-user")
    with db.cursor() as cur:
        create_users(cur, [user])
    event = _deposit(user)
    conn = connect(database_url("owner"))
    try:
        with conn.cursor() as cur:
            cur.execute("SET LOCAL lock_timeout = '5s'")
            cur.execute("ALTER TABLE event_status ADD CONSTRAINT event_status_test_refuses"
                        " CHECK (event_id <> %s) NOT VALID", (event.event_id,))
            cur.execute("SAVEPOINT write")
            with pytest.raises(psycopg2.errors.CheckViolation):
                write_events(cur, [(event, "t")])
            cur.execute("ROLLBACK TO SAVEPOINT write")
            with pytest.raises(psycopg2.errors.CheckViolation):
                write_event(cur, event, "t")
    finally:
        conn.rollback()
        conn.close()
    assert _rows(db, "SELECT count(*) FROM payment_events WHERE event_id = %s",
                 (event.event_id,)) == [(0,)]


def test_the_ledger_moves_the_status_and_never_rewrites_the_event_row(db, ledger_db) -> None:
    """A ledger batch writes no new version of any payment_events row (same xmin and
    ctid before and after); the status rows move, as the one transition function says."""
    user = unique("status-user")
    with db.cursor() as cur:
        create_users(cur, [user])
    events = [_deposit(user, "10"), _deposit(user, "5"),
              PaymentEvent(unique("status-ev"), EventType.WITHDRAWAL, user, "USDC",
                           Decimal(1000), "test")]  # more than the balance: rejected
    ids = [e.event_id for e in events]
    with db.cursor() as cur:
        assert write_events(cur, [(e, "t") for e in events]) == [WriteOutcome.ACCEPTED] * 3
    versions = "SELECT event_id, xmin::text, ctid::text FROM payment_events" \
               " WHERE event_id = ANY(%s) ORDER BY 1"
    before = _rows(db, versions, (ids,))
    result = ledger_apply(ledger_db.connection(), [record_of(wire_message(e), offset=i)
                                                   for i, e in enumerate(events, 5_000)])
    assert result.outcomes["applied"] == 2, result.outcomes
    assert _rows(db, versions, (ids,)) == before
    assert dict(_rows(db, "SELECT event_id, status FROM event_status"
                          " WHERE event_id = ANY(%s)", (ids,))) == {
        ids[0]: "applied", ids[1]: "applied", ids[2]: "rejected"}
    assert _rows(db, "SELECT bool_and(s.status_changed_at > p.received_at)"
                     " FROM event_status s JOIN payment_events p USING (event_id)"
                     " WHERE event_id = ANY(%s)", (ids,)) == [(True,)]


# --- migration 0030 on a database that kept the status in payment_events --------------

OLD_ROWS = [  # (event id, status, status_changed_at)
    ("m-received", "received", "2026-11-01 10:00:00+00:00"),
    ("m-replayed", "received", "2026-11-03 09:00:00+00:00"),  # replayed: received again
    ("m-applied", "applied", "2026-11-01 10:00:01+00:00"),
    ("m-rejected", "rejected", "2026-11-01 10:00:02+00:00"),
    ("m-dead", "dead_lettered", "2026-11-01 10:00:03+00:00"),
    ("m-pending", "pending_finality", "2026-11-01 10:00:04+00:00"),
    ("m-credited", "credited", "2026-11-01 10:00:05+00:00"),
    ("m-reorged", "reorged", "2026-11-01 10:00:06+00:00"),
    ("m-reversed", "reversed", "2026-11-01 10:00:07+00:00"),
]


# Each row as the ingest and the ledger left it at 0029: the status in payment_events.
OLD_SQL = " ".join(
    "INSERT INTO payment_events (event_id, provider, event_type, user_id, asset, amount,"
    " status, content_hash, trace_id, payload, received_at, status_changed_at) VALUES"
    f" ('{e}', 'test', 'deposit', 'u', 'USD', 1, '{s}', 'h', 't', '{{}}',"
    f" '2026-11-01 10:00:00+00', '{c}');" for e, s, c in OLD_ROWS)


@pytest.fixture
def database_at_0029() -> Iterator[PostgresAddress]:
    """A scratch database at migration 0029 whose payment_events hold every status."""
    with database_at("0029_operator_console", OLD_SQL) as address:
        yield address


def test_the_migration_keeps_every_status_and_leaves_payment_events_insert_only(
        database_at_0029) -> None:
    owner = connect(database_at_0029.dsn("owner"))
    owner.autocommit = True
    try:
        assert apply_pending(owner, upto="0030_event_status") == ["0030_event_status"]
        assert _rows(owner, "SELECT event_id, status, status_changed_at FROM event_status"
                            " ORDER BY event_id") == sorted(
            (e, s, datetime.fromisoformat(c)) for e, s, c in OLD_ROWS)
        assert _rows(owner, "SELECT count(*) FROM pg_attribute WHERE attrelid ="
                            " 'payment_events'::regclass AND NOT attisdropped"
                            " AND attname IN ('status', 'status_changed_at')") == [(0,)]
        assert _rows(owner, "SELECT indexname FROM pg_indexes"
                            " WHERE tablename IN ('payment_events', 'event_status')"
                            " ORDER BY 1") == [
            ("event_status_pkey",), ("event_status_received_idx",),
            ("payment_events_pkey",), ("payment_events_trace_idx",),
            ("payment_events_user_idx",)]
        # The stuck-events index holds the two received rows, by their status change.
        assert _rows(owner, "SET enable_seqscan = off; SELECT event_id FROM event_status"
                            " WHERE status = 'received' ORDER BY status_changed_at") == [
            ("m-received",), ("m-replayed",)]
    finally:
        owner.close()
