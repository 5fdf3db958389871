"""A record can reach the ledger before its stored row is visible (Debezium streams a
commit once it is in the WAL; Postgres shows it to other sessions just after, or, with a
synchronous standby, once the standby confirms). The ledger looks again before it
judges a record unknown (schema/visibility.py), so an honest event whose row commits
while its batch runs is applied, and a record with no row at all is still a dead
letter. Against the real Postgres, as the ledger role."""

from __future__ import annotations

import json
import statistics
import threading
import time
from decimal import Decimal

from paystream.consumers.records import Origin, Record
from paystream.schema import visibility
from paystream.schema.db import connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from paystream.schema.visibility import SHORT_PAUSES_S
from paystream.stack import postgres
from paystream.stack.settings import StackSettings
from tests.support.consumers import create_users, store_events
from tests.support.ids import unique
from tests.support.ledger import ledger_apply


def _record(event: PaymentEvent, offset: int) -> Record:
    headers = (("event_id", event.event_id.encode()),
               ("event_type", event.event_type.value.encode()), ("trace_id", b"t-visible"))
    return Record(Origin("paystream.payments", 0, offset), event.user_id.encode(),
                  json.dumps(event.to_wire()).encode(), headers, None)


def _store_later(event: PaymentEvent, delay_s: float) -> threading.Timer:
    """Commit the event's payment_events row from another session after `delay_s`."""
    def store() -> None:
        conn = connect(database_url("owner"))
        try:
            with conn, conn.cursor() as cur:
                store_events(cur, [event])
        finally:
            conn.close()
    timer = threading.Timer(delay_s, store)
    timer.start()
    return timer


def _balance(db, user: str, asset: str) -> Decimal:
    with db.cursor() as cur:
        cur.execute("SELECT balance FROM balances WHERE user_id = %s AND asset = %s",
                    (user, asset))
        row = cur.fetchone()
    return row[0] if row else Decimal(0)


def test_an_event_whose_row_commits_while_its_batch_runs_is_applied(db, ledger_db) -> None:
    user = unique("visible-late")
    with db.cursor() as cur:
        create_users(cur, [user])
    event = PaymentEvent(f"{user}-d1", EventType.DEPOSIT, user, "USD", Decimal("12.5"),
                         "payments")
    # The row appears 0.3 s after the ledger first looks: within the re-check window.
    timer = _store_later(event, 0.3)
    result = ledger_apply(ledger_db.connection(), [_record(event, 1)])
    timer.join()
    assert result.dead_letters == []
    assert result.outcomes["applied"] == 1
    assert _balance(db, user, "USD") == Decimal("12.5")
    with db.cursor() as cur:
        cur.execute("SELECT status FROM event_status WHERE event_id = %s",
                    (event.event_id,))
        assert cur.fetchone() == ("applied",)


def test_a_record_whose_row_never_appears_is_still_unknown(db, ledger_db) -> None:
    user = unique("visible-never")
    with db.cursor() as cur:
        create_users(cur, [user])
    forged = PaymentEvent(f"{user}-d1", EventType.DEPOSIT, user, "USD", Decimal("7"),
                          "payments")
    result = ledger_apply(ledger_db.connection(), [_record(forged, 1)])
    assert [d.reason for d in result.dead_letters] == ["unknown_event"]
    assert _balance(db, user, "USD") == 0


def test_a_row_that_appears_after_the_window_is_not_waited_for(db, ledger_db) -> None:
    """The wait is bounded: a row committed well after the last re-check does not
    save the record (it is a dead letter, replayable once the row exists)."""
    user = unique("visible-too-late")
    with db.cursor() as cur:
        create_users(cur, [user])
    event = PaymentEvent(f"{user}-d1", EventType.DEPOSIT, user, "USD", Decimal("3"),
                         "payments")
    timer = _store_later(event, sum(SHORT_PAUSES_S) + 1.5)
    result = ledger_apply(ledger_db.connection(), [_record(event, 1)])
    timer.join()
    assert [d.reason for d in result.dead_letters] == ["unknown_event"]
    assert _balance(db, user, "USD") == 0


def _sync_standby(name: str) -> None:
    postgres.superuser_sql(StackSettings.from_env(),
                           f"ALTER SYSTEM SET synchronous_standby_names = '{name}';\n"
                           "SELECT pg_reload_conf();\n")


def test_a_writer_waiting_for_its_synchronous_standby_is_waited_for(db, ledger_db) -> None:
    """As when the standby dies: the writer's commit is in the WAL (Debezium could ship
    it) but waits for a standby that does not answer, invisible, until pg_auto_failover
    stops asking (~20 s). Here a standby name nobody has, for longer than the short
    pauses; the ledger's own session commits locally."""
    user = unique("visible-sync")
    with db.cursor() as cur:
        create_users(cur, [user])
    db.commit()
    event = PaymentEvent(f"{user}-d1", EventType.DEPOSIT, user, "USD", Decimal("4.25"),
                         "payments")
    writer_done = threading.Event()

    def write() -> None:
        conn = connect(database_url("owner"))
        try:
            with conn, conn.cursor() as cur:
                store_events(cur, [event])  # its COMMIT waits for the standby
        finally:
            conn.close()
            writer_done.set()
    conn = ledger_db.connection()
    with conn.cursor() as cur:
        cur.execute("SET synchronous_commit = local")
    conn.commit()
    _sync_standby("paystream_absent_standby")
    try:
        threading.Thread(target=write, daemon=True).start()
        # The standby "comes back" (the wait drops) after the short pauses are over.
        release = threading.Timer(sum(SHORT_PAUSES_S) + 3.0, _sync_standby, args=("",))
        release.start()
        time.sleep(0.5)
        assert not writer_done.is_set(), "the writer's commit did not wait"
        result = ledger_apply(conn, [_record(event, 1)])
        release.join()
    finally:
        _sync_standby("")
    assert writer_done.wait(10)
    assert result.dead_letters == [], [d.reason for d in result.dead_letters]
    assert result.outcomes["applied"] == 1
    assert _balance(db, user, "USD") == Decimal("4.25")


def test_the_first_look_again_comes_when_the_writers_end_not_after_a_pause(db) -> None:
    """A commit waiting for its synchronous standby's flush ends within milliseconds, and
    the ledger's whole batch waits with it: the first look again is taken once the
    transactions running at the first look have ended, not after a fixed first pause
    (which made every such batch wait SHORT_PAUSES_S[0])."""
    took = []
    for _ in range(5):
        writer, reader = connect(database_url("owner")), connect(database_url("ledger"))
        try:
            with writer.cursor() as wcur:
                wcur.execute("SELECT pg_current_xact_id()")  # in progress until it commits
            release = threading.Timer(0.004, writer.commit)
            with reader.cursor() as rcur:
                began = time.monotonic()
                looks = visibility.waits(rcur)
                release.start()
                next(looks)
                took.append(time.monotonic() - began)
                release.join()
        finally:
            reader.close()
            writer.close()
    assert statistics.median(took) < SHORT_PAUSES_S[0] * 0.75, took
