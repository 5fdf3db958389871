"""A new event type touches one home: `cashback`, declared in a test alone
(tests/support/cashback.py: a gateway's credit paid out of the platform's fees), is
refused by the database until the migrator syncs the CHECK with the declarations, then
accepted by the ingest's parser and stored as the ingest stores it, applied by the real
ledger against the account its declaration names, reversible by the gateway's refund,
and told to its user through the outbox and Debezium. Afterwards the CHECK is synced
back to the shipped types, online (schema/migrate.py, sync_event_types)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from itertools import count

import psycopg2.errors
import pytest

from paystream.consumers.ledger.reconcile import reconcile
from paystream.ingest.payments import parse_payment
from paystream.schema.db import Connection
from paystream.schema.event_types import EventType
from paystream.schema.migrate import EVENT_TYPE_CHECKS, MigrateSettings, sync_event_types
from tests.support.cashback import cashback_declared
from tests.support.consumers import create_users, record_of, store_events, wire_message
from tests.support.ids import unique
from tests.support.ledger import ledger_apply
from tests.support.migrations import allowed

FAST = MigrateSettings(PAYSTREAM_MIGRATE_LOCK_TRIES=3, PAYSTREAM_MIGRATE_RETRY_PAUSE_S=0.1)
[(TABLE, _, CONSTRAINT)] = EVENT_TYPE_CHECKS
_offsets = count(9_000_000)


def _allowed(db: Connection) -> tuple[list[str], bool]:
    return allowed(db, TABLE, CONSTRAINT)


@pytest.fixture
def cashback(db: Connection) -> Iterator[EventType]:
    shipped = [t.value for t in EventType]
    assert _allowed(db) == (shipped, True)
    try:
        with cashback_declared() as declared:
            yield declared
    finally:
        with db.cursor() as cur:
            cur.execute("DELETE FROM payment_events WHERE event_type = 'cashback'")
        assert sync_event_types(db, FAST) == [CONSTRAINT]
        assert _allowed(db) == (shipped, True)


def test_a_type_declared_in_a_test_alone_goes_from_the_gateway_to_the_user(
        cashback: EventType, db: Connection, ledger_db, topic_reader) -> None:
    user = unique("cashback-u")
    with db.cursor() as cur:
        create_users(cur, [user])
    notices = topic_reader("paystream.notifications")
    deposit = parse_payment({"event_id": unique("dep"), "event_type": "deposit",
                             "user_id": user, "amount": "10"}, "USD")
    paid = parse_payment({"event_id": unique("cb"), "event_type": "cashback",
                          "user_id": user, "amount": "2.5"}, "USD")
    assert paid.event_type is cashback

    # The database refuses it until the migrator syncs the CHECK (once: then in step).
    with db.cursor() as cur, pytest.raises(psycopg2.errors.CheckViolation):
        store_events(cur, [paid])
    assert sync_event_types(db, FAST) == [CONSTRAINT]
    assert sync_event_types(db, FAST) == []
    assert _allowed(db) == ([t.value for t in EventType], True)
    assert "cashback" in _allowed(db)[0]

    with db.cursor() as cur:
        store_events(cur, [deposit, paid])
    result = ledger_apply(ledger_db.connection(), [
        record_of(wire_message(e), offset=next(_offsets)) for e in (deposit, paid)])
    assert not result.dead_letters, result.dead_letters
    with db.cursor() as cur:
        cur.execute("SELECT a.kind, a.owner, p.amount FROM postings p"
                    " JOIN transfers t USING (transfer_id) JOIN accounts a USING (account_id)"
                    " WHERE t.source_event_id = %s ORDER BY 1", (paid.event_id,))
        assert cur.fetchall() == [("available", user, Decimal("2.5")),
                                  ("fees", "platform", Decimal("-2.5"))]
        cur.execute("SELECT status FROM event_status WHERE event_id = %s", (paid.event_id,))
        assert cur.fetchone() == ("applied",)
        cur.execute("SELECT balance FROM balances WHERE user_id = %s", (user,))
        assert cur.fetchone() == (Decimal("12.5"),)

    # The gateway may refund it, as any credit of its own: back to the fees account.
    refund = parse_payment({"event_id": unique("rf"), "event_type": "refund",
                            "user_id": user, "amount": "1", "reverses": paid.event_id},
                           "USD")
    with db.cursor() as cur:
        store_events(cur, [refund])
    assert not ledger_apply(ledger_db.connection(), [
        record_of(wire_message(refund), offset=next(_offsets))]).dead_letters
    with db.cursor() as cur:
        cur.execute("SELECT a.kind, p.amount FROM postings p JOIN transfers t"
                    " USING (transfer_id) JOIN accounts a USING (account_id)"
                    " WHERE t.source_event_id = %s ORDER BY 1", (refund.event_id,))
        assert cur.fetchall() == [("available", Decimal(-1)), ("fees", Decimal(1))]

    # Told to its user: the intent its declaration names, through the outbox and Debezium.
    told = notices.read(2, 30, lambda m: user in (m.value() or b"").decode())
    intents = [i for m in told for i in json.loads(m.value())["intents"]]
    assert {(i["data"]["event_type"], i["type"]) for i in intents} >= {
        ("cashback", "deposit.credited"), ("refund", "balance.reversed")}, intents
    report = reconcile(db, users=[user])
    assert report.clean, (report.mismatches, report.transfer_problems)
