"""The ledger's declared consequences (consumers/ledger/consequences.py) against the
real Postgres, as the ledger role: they run in the batch transaction, in their order,
only for events planned in it; one that raises leaves nothing of the batch behind (no
money, no outcome, no status, no notice), and the consumer's isolation then
dead-letters the records with its error instead of applying them without it. One
declared in a test alone (tests/support/bonus_consequence.py) is found and placed as
the product's are (paystream/ledger_consequences.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal

import psycopg2.errors
import pytest

from paystream.consume import ledger_handler
from paystream.consumers.commit import apply_with_isolation
from paystream.consumers.ledger.consequences import AppliedBatch, Consequence
from paystream.consumers.ledger.handler import LedgerHandler
from paystream.consumers.ledger.settings import LedgerSettings
from paystream.consumers.records import Origin, Record
from paystream.schema.db import Connection, Cursor, connect, database_url
from tests.support import bonus_consequence as bonus
from tests.support.consumers import create_users, store_records
from tests.support.ids import unique
from tests.support.ledger import ledger_apply
from tests.support.topics import TopicReader


def deposit(user: str, event_id: str, amount: str, offset: int) -> Record:
    value = {"event_id": event_id, "event_type": "deposit", "user_id": user,
             "asset": "USDC", "amount": amount, "provider": "test"}
    return Record(Origin("paystream.payments", 3, offset), user.encode(),
                  json.dumps(value).encode(),
                  (("event_id", event_id.encode()), ("event_type", b"deposit"),
                   ("trace_id", f"trace-{event_id}".encode())), None)


class Recorder:
    def __init__(self, name: str, seen: list[tuple[str, list[str], int]]) -> None:
        self.name = name
        self.seen = seen

    def write(self, cur: Cursor, batch: AppliedBatch) -> None:
        self.seen.append((self.name, [c.event.event_id for c, _ in batch.plan.decisions],
                          len(batch.told)))


class Failing:
    name = "failing"

    def write(self, cur: Cursor, batch: AppliedBatch) -> None:
        raise RuntimeError("a consequence that fails")


def with_consequences(*extra: Consequence, before: bool = False) -> LedgerHandler:
    """The group's handler with `extra` consequences after its registered ones (or
    before them)."""
    real = ledger_handler()
    mine = list(real.consequences)
    return LedgerHandler(LedgerSettings.from_env(), real.reconciler,
                         [*extra, *mine] if before else [*mine, *extra], real.clock)


@pytest.fixture
def ledger_conn() -> Iterator[Connection]:
    conn = connect(database_url("ledger"), application_name="paystream-test-consequences")
    try:
        yield conn
    finally:
        conn.close()


def _state(db: Connection, user: str, event_ids: list[str]) -> dict[str, object]:
    with db.cursor() as cur:
        cur.execute("SELECT balance FROM balances WHERE user_id = %s", (user,))
        balance = cur.fetchone()
        cur.execute("SELECT count(*) FROM processed_events WHERE event_id = ANY(%s)",
                    (event_ids,))
        outcomes = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM transfers WHERE source_event_id = ANY(%s)",
                    (event_ids,))
        moved = cur.fetchone()[0]
        cur.execute("SELECT array_agg(DISTINCT status) FROM event_status"
                    " WHERE event_id = ANY(%s)", (event_ids,))
        statuses = cur.fetchone()[0]
    return {"balance": None if balance is None else balance[0], "outcomes": outcomes,
            "transfers": moved, "statuses": statuses}


def test_consequences_run_in_order_in_the_batch_and_a_failing_one_leaves_nothing(
        db: Connection, ledger_conn: Connection,
        topic_reader: Callable[[str], TopicReader]) -> None:
    user = unique("consequences")
    records = [deposit(user, f"{user}-d{i}", "5", i) for i in range(3)]
    ids = [f"{user}-d{i}" for i in range(3)]
    with db.cursor() as cur:
        create_users(cur, [user])
        store_records(cur, records)
    untouched = {"balance": None, "outcomes": 0, "transfers": 0, "statuses": ["received"]}
    notices = topic_reader("paystream.notifications")

    # Raised in the batch transaction, after every other write: all of it rolls back.
    with ledger_conn.cursor() as cur, pytest.raises(RuntimeError, match="fails"):
        with_consequences(Failing()).apply(cur, records)
    ledger_conn.rollback()
    assert _state(db, user, ids) == untouched
    # As the consumer runs it: the batch, then each record alone, fails; each is a dead
    # letter naming the error, and none is applied without its consequences.
    result = apply_with_isolation(ledger_conn, with_consequences(Failing(), before=True),
                                  records)
    ledger_conn.rollback()
    assert len(result.dead_letters) == 3, result
    assert all("a consequence that fails" in d.detail for d in result.dead_letters)
    assert _state(db, user, ids) == untouched

    # The registered order, each handed the batch's fresh decisions; the invoices' and
    # chain deposits' ran before the recorder placed after them.
    seen: list[tuple[str, list[str], int]] = []
    handler = with_consequences(Recorder("first", seen), before=True)
    handler.consequences = (*handler.consequences, Recorder("last", seen))
    with ledger_conn.cursor() as cur:
        handler.apply(cur, records)
    ledger_conn.commit()
    assert [name for name, _, _ in seen] == ["first", "last"]
    assert all(decided == ids for _, decided, _ in seen)
    state = _state(db, user, ids)
    assert state["balance"] == Decimal(15) and state["outcomes"] == 3
    assert state["transfers"] == 3 and state["statuses"] == ["applied"]
    # The notifications consequence: one record for the batch's partition, on the topic
    # through the outbox and Debezium, holding the three deposits' intents (the failed
    # attempts above sent none).
    told = notices.read(1, 20, lambda m: user in (m.value() or b"").decode())
    assert len(told) == 1, told
    intents = json.loads(told[0].value())["intents"]
    assert sorted(i["data"]["event_id"] for i in intents) == ids
    assert {i["type"] for i in intents} == {"deposit.credited"}

    # Redelivered: duplicates before step 8, so no consequence runs and nothing is
    # written twice.
    seen.clear()
    with ledger_conn.cursor() as cur:
        again = handler.apply(cur, records)
    ledger_conn.commit()
    assert again.outcomes["duplicate"] == 3 and seen == []
    assert _state(db, user, ids) == state
    assert notices.read(1, 3, lambda m: user in (m.value() or b"").decode()) == []


def _points(conn: Connection, user: str) -> list[tuple[str, int]]:
    with conn.cursor() as cur:
        cur.execute("SELECT event_id, points FROM bonus_points WHERE user_id = %s"
                    " ORDER BY event_id", (user,))
        rows = cur.fetchall()
    conn.commit()
    return rows


@pytest.fixture
def bonus_table(db: Connection) -> Iterator[None]:
    with bonus.made(db):
        yield


@pytest.mark.usefixtures("bonus_table")
def test_a_consequence_declared_in_a_test_alone_runs_in_its_place_in_the_batch(
        db: Connection, ledger_conn: Connection,
        topic_reader: Callable[[str], TopicReader]) -> None:
    conn = ledger_conn
    user = unique("bonus")
    small = [deposit(user, f"{user}-d{i}", "7.9", i) for i in range(2)]
    big = deposit(user, f"{user}-big", str(bonus.MOST_POINTS + 1), 2)
    with db.cursor() as cur:
        create_users(cur, [user])
        store_records(cur, [*small, big])
    notices = topic_reader("paystream.notifications")
    # Found as `paystream consume ledger` finds the product's, in its declared place:
    # after the invoices, before the notifications that run last.
    handler = ledger_handler(also=("tests.support",))
    assert [c.name for c in handler.consequences] == [
        "chain_deposits", "invoices", "bonus_points", "notifications"]
    assert "bonus_points" not in [c.name for c in ledger_handler().consequences]

    # Too many points for its table: it fails in the batch transaction, after the
    # ledger's writes and the consequences before it; nothing of the batch is left.
    ids = [f"{user}-d0", f"{user}-d1", f"{user}-big"]
    with conn.cursor() as cur, pytest.raises(psycopg2.errors.CheckViolation):
        handler.apply(cur, [*small, big])
    conn.rollback()
    assert _state(db, user, ids) == {"balance": None, "outcomes": 0, "transfers": 0,
                                     "statuses": ["received"]}
    assert _points(conn, user) == []

    # Within its table's bounds: its points are written with the batch's money, and the
    # notifications after it still send the batch's intents.
    result = ledger_apply(conn, small, also=("tests.support",))
    assert not result.dead_letters and result.outcomes["applied"] == 2, result
    assert _points(conn, user) == [(f"{user}-d0", 7), (f"{user}-d1", 7)]
    assert _state(db, user, ids[:2])["balance"] == Decimal("15.8")
    told = notices.read(1, 20, lambda m: user in (m.value() or b"").decode())
    assert sorted(i["data"]["event_id"] for i in json.loads(told[0].value())["intents"]) \
        == ids[:2]
