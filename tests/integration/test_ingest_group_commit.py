"""Group commit against the real Postgres: one transaction for many deliveries, one
savepoint per delivery, answers only after the COMMIT (ingest/writer.py, ingest/store.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg2
import pytest

from paystream.ingest import alchemy
from paystream.ingest.errors import (
    ConflictingDuplicateError,
    DatabaseUnavailableError,
    PayloadError,
)
from paystream.ingest.payments import PaymentWrite
from paystream.ingest.recording import Recorded
from paystream.ingest.store import Cursor, EventStore
from paystream.ingest.writer import GroupCommitWriter
from paystream.schema.db import connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from paystream.schema.outbox import WriteOutcome
from tests.support.ids import unique
from tests.support.ingest import (
    alchemy_body,
    erc20_activity,
    eth_activity,
    known_user,
    random_address,
)


@pytest.fixture
def store() -> Iterator[EventStore]:
    events = EventStore(database_url("ingest"), connect_timeout_s=2, statement_timeout_ms=2000,
                        retry_after_s=7)
    yield events
    events.close()


def _payment(event_id: str, user: str, amount: str) -> PaymentEvent:
    return PaymentEvent(event_id=event_id, event_type=EventType.DEPOSIT, user_id=user,
                        asset="USD", amount=Decimal(amount), provider="payments")


def _write(event: PaymentEvent) -> Callable[[Cursor], Recorded]:
    return PaymentWrite(event, f"trace-{event.event_id}").write


def _amounts(db, user: str) -> dict[str, Decimal]:
    with db.cursor() as cur:
        cur.execute("SELECT event_id, amount FROM payment_events WHERE user_id = %s", (user,))
        return dict(cur.fetchall())


def _outcomes(outcome: Any) -> list[WriteOutcome]:
    assert isinstance(outcome, Recorded), outcome
    return [o for _, o in outcome.events]


def test_a_conflict_in_a_group_is_rolled_back_alone(store: EventStore, db) -> None:
    user = known_user()
    known = _payment(unique("ev"), user, "5")
    store.run(_write(known))
    good_a, good_b = _payment(unique("ev"), user, "1"), _payment(unique("ev"), user, "2")
    tampered = _payment(known.event_id, user, "500")  # same id, other content
    outcomes = store.commit_group([_write(good_a), _write(tampered), _write(good_b)])
    assert _outcomes(outcomes[0]) == [WriteOutcome.ACCEPTED]
    assert isinstance(outcomes[1], ConflictingDuplicateError) and outcomes[1].status == 409
    assert _outcomes(outcomes[2]) == [WriteOutcome.ACCEPTED]
    assert _amounts(db, user) == {known.event_id: Decimal(5), good_a.event_id: Decimal(1),
                                  good_b.event_id: Decimal(2)}


def test_an_alchemy_payload_is_one_savepoint_all_or_nothing(store: EventStore, db) -> None:
    user, address = known_user(), random_address()
    with db.cursor() as cur:
        cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                    " VALUES ('ETH_MAINNET', %s, %s)", (address, user))
    usdc = erc20_activity(address, 1_000_000)
    tampered = json.loads(json.dumps(usdc))
    tampered["rawContract"]["rawValue"] = hex(9_000_000)  # same log, other amount

    def delivery(activities: list[dict[str, Any]]) -> alchemy.AlchemyWrite:
        parsed = alchemy.parse_delivery(json.loads(alchemy_body(activities)))
        return alchemy.AlchemyWrite(parsed, unique("trace"))

    fresh, other = eth_activity(address, 10**18), eth_activity(address, 3 * 10**18)
    # One group: the original transfer, then a payload holding a new transfer AND the
    # tampered one (409: neither of its two events may stay), then another payload.
    outcomes = store.commit_group([delivery([usdc]), delivery([fresh, tampered]),
                                   delivery([other])])
    assert _outcomes(outcomes[0]) == [WriteOutcome.ACCEPTED]
    assert isinstance(outcomes[1], ConflictingDuplicateError)
    assert _outcomes(outcomes[2]) == [WriteOutcome.ACCEPTED]
    assert sorted(_amounts(db, user).values()) == [Decimal(1), Decimal(3)]  # not `fresh`


def test_identical_deliveries_in_one_group_are_accepted_then_duplicate(store: EventStore,
                                                                        db) -> None:
    user = known_user()
    event = _payment(unique("ev"), user, "7.5")
    outcomes = store.commit_group([_write(event), _write(event), _write(event)])
    assert [_outcomes(o) for o in outcomes] == [[WriteOutcome.ACCEPTED],
                                                 [WriteOutcome.DUPLICATE],
                                                 [WriteOutcome.DUPLICATE]]
    assert _amounts(db, user) == {event.event_id: Decimal("7.5")}
    with db.cursor() as cur:  # and one outbox message, so one Kafka message
        cur.execute("SELECT count(*) FROM payment_events WHERE event_id = %s",
                    (event.event_id,))
        assert cur.fetchone()[0] == 1


def test_a_delivery_the_database_rejects_is_a_400_alone(store: EventStore, db) -> None:
    user = known_user()
    good = _payment(unique("ev"), user, "1")

    def rejected(cur: Cursor) -> None:
        _write(_payment(unique("ev"), user, "99"))(cur)  # written, then undone
        cur.execute("SELECT 'not a number'::int")  # DataError, as a constraint would be

    outcomes = store.commit_group([rejected, _write(good)])
    assert isinstance(outcomes[0], PayloadError) and outcomes[0].status == 400
    assert outcomes[0].code == "constraint_violation"
    assert _amounts(db, user) == {good.event_id: Decimal(1)}


def _kill_own_connection(cur: Cursor) -> None:
    cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")


def test_a_database_failure_mid_group_is_503_for_all_and_writes_nothing(store: EventStore,
                                                                        db) -> None:
    user = known_user()
    before, after = _payment(unique("ev"), user, "1"), _payment(unique("ev"), user, "2")
    # The connection dies after `before` ran in the group, on both attempts.
    with pytest.raises(DatabaseUnavailableError) as failed:
        store.commit_group([_write(before), _kill_own_connection, _write(after)])
    assert failed.value.status == 503 and failed.value.retry_after == 7
    assert _amounts(db, user) == {}
    # The store still works afterwards (the dead connection was not pooled).
    assert _outcomes(store.run(_write(before))) == [WriteOutcome.ACCEPTED]


def test_a_failure_on_the_first_attempt_only_is_retried_whole(store: EventStore, db) -> None:
    user = known_user()
    first, second = _payment(unique("ev"), user, "1"), _payment(unique("ev"), user, "2")
    attempts = []

    def dies_once(cur: Cursor) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            _kill_own_connection(cur)
        return "survived"

    outcomes = store.commit_group([_write(first), dies_once, _write(second)])
    assert outcomes[1] == "survived" and len(attempts) == 2
    assert _outcomes(outcomes[0]) == _outcomes(outcomes[2]) == [WriteOutcome.ACCEPTED]
    assert _amounts(db, user) == {first.event_id: Decimal(1), second.event_id: Decimal(2)}


class _WatchedStore(EventStore):
    """Records, per group, whether COMMIT had returned: for the answer-after-commit rule."""

    def __init__(self) -> None:
        super().__init__(database_url("ingest"), connect_timeout_s=2, statement_timeout_ms=2000,
                         retry_after_s=5)
        self.committed: set[int] = set()
        self.groups: list[int] = []

    def commit_group(self, works):  # type: ignore[no-untyped-def]
        outcomes = super().commit_group(works)
        self.groups.append(len(works))
        self.committed.update(id(o) for o in outcomes)
        return outcomes


def test_the_writer_groups_queued_deliveries_and_answers_after_commit(db) -> None:
    store = _WatchedStore()
    writer = GroupCommitWriter(store, writers=1, max_batch=64, linger_s=0.3)
    user = known_user()
    events = [_payment(unique("ev"), user, str(n + 1)) for n in range(40)]

    async def send_all() -> list[Any]:
        async def one(event: PaymentEvent) -> bool:
            recorded = await writer.write(_write(event))
            # When a request wakes up, its group's COMMIT has returned.
            return id(recorded) in store.committed
        return await asyncio.gather(*(one(e) for e in events))

    try:
        assert asyncio.run(send_all()) == [True] * 40
    finally:
        writer.close()
        store.close()
    assert store.groups == [40]  # one transaction, one WAL flush, for all 40
    assert len(_amounts(db, user)) == 40


def test_the_writer_answers_every_delivery_of_a_failed_group_503(db) -> None:
    store = EventStore("postgresql://paystream:paystream@127.0.0.1:1/none",
                       connect_timeout_s=1, statement_timeout_ms=1000, retry_after_s=3)
    writer = GroupCommitWriter(store, writers=2, max_batch=8, linger_s=0.05)

    async def send_all() -> list[BaseException | Any]:
        works = [_write(_payment(unique("ev"), "nobody", "1")) for _ in range(10)]
        return await asyncio.gather(*(writer.write(w) for w in works),
                                    return_exceptions=True)

    try:
        answers = asyncio.run(send_all())
    finally:
        writer.close()
    assert all(isinstance(a, DatabaseUnavailableError) and a.retry_after == 3
               for a in answers), answers


def test_the_connection_error_types_are_transient() -> None:
    # A lost connection surfaces as one of these; both must fail the group, not a delivery.
    from paystream.ingest.store import TRANSIENT_ERRORS
    assert issubclass(psycopg2.errors.AdminShutdown, TRANSIENT_ERRORS)
    assert issubclass(psycopg2.errors.DeadlockDetected, TRANSIENT_ERRORS)
    assert issubclass(psycopg2.errors.QueryCanceled, TRANSIENT_ERRORS)


# --- gateway deliveries that meet in a group share multi-row statements ------------------

def _together(store: EventStore, writes: list[PaymentWrite]) -> list[Any]:
    return store.commit_group(writes)


def test_grouped_payments_have_the_outcomes_of_one_by_one(store: EventStore, db) -> None:
    user = known_user()
    known = _payment(unique("ev"), user, "5")
    store.run(PaymentWrite(known, "t-known"))
    fresh, twice = _payment(unique("ev"), user, "1"), _payment(unique("ev"), user, "2")
    other_twice = _payment(twice.event_id, user, "20")
    group = [PaymentWrite(fresh, "t-fresh"), PaymentWrite(known, "t-again"),
             PaymentWrite(_payment(known.event_id, user, "50"), "t-conflict"),
             PaymentWrite(twice, "t-twice"), PaymentWrite(twice, "t-twice-again"),
             PaymentWrite(other_twice, "t-other")]
    outcomes = _together(store, group)
    assert _outcomes(outcomes[0]) == [WriteOutcome.ACCEPTED]
    assert _outcomes(outcomes[1]) == [WriteOutcome.DUPLICATE]
    assert isinstance(outcomes[2], ConflictingDuplicateError)
    assert outcomes[2].event_id == known.event_id
    assert _outcomes(outcomes[3]) == [WriteOutcome.ACCEPTED]
    assert _outcomes(outcomes[4]) == [WriteOutcome.DUPLICATE]
    assert isinstance(outcomes[5], ConflictingDuplicateError)  # same id as `twice`, other amount
    assert _amounts(db, user) == {known.event_id: Decimal(5), fresh.event_id: Decimal(1),
                                  twice.event_id: Decimal(2)}
    with db.cursor() as cur:  # each accepted event once in the WAL's outbox inserts
        cur.execute("SELECT event_id, trace_id FROM payment_events WHERE user_id = %s"
                    " ORDER BY event_id", (user,))
        traces = dict(cur.fetchall())
    assert traces[fresh.event_id] == "t-fresh" and traces[twice.event_id] == "t-twice"


def test_grouped_ids_with_json_and_sql_metacharacters_round_trip(store: EventStore,
                                                                  db) -> None:
    # Grouped rows travel inside one JSON document inside one SQL literal: quotes,
    # backslashes and escape-like text must come out as they went in.
    user = known_user()
    event = _payment(unique("ev") + '"\\\'$%{}[]:,\\u0000', user, "3")
    outcomes = _together(store, [PaymentWrite(event, 'trace"\\x'),
                                 PaymentWrite(event, "t-again")])
    assert [_outcomes(o) for o in outcomes] == [[WriteOutcome.ACCEPTED],
                                                [WriteOutcome.DUPLICATE]]
    with db.cursor() as cur:
        cur.execute("SELECT event_id, trace_id, payload->>'event_id', content_hash"
                    " FROM payment_events WHERE user_id = %s", (user,))
        assert cur.fetchall() == [(event.event_id, 'trace"\\x', event.event_id,
                                   event.content_hash())]
    # The one-by-one path finds the same content: a redelivery is a duplicate there too.
    assert _outcomes(store.run(PaymentWrite(event, "t-later"))) == [WriteOutcome.DUPLICATE]


def test_a_grouped_payment_the_database_rejects_is_isolated(store: EventStore, db) -> None:
    user = known_user()
    good_a, good_b = _payment(unique("ev"), user, "1"), _payment(unique("ev"), user, "2")
    # An amount the NUMERIC(38,18) column cannot hold: validation would stop it at the
    # door; here it stands for any row the database refuses.
    huge = _payment(unique("ev"), user, "1" + "0" * 25)
    outcomes = _together(store, [PaymentWrite(good_a, "a"), PaymentWrite(huge, "h"),
                                 PaymentWrite(good_b, "b")])
    assert _outcomes(outcomes[0]) == _outcomes(outcomes[2]) == [WriteOutcome.ACCEPTED]
    assert isinstance(outcomes[1], PayloadError) and outcomes[1].status == 400
    assert _amounts(db, user) == {good_a.event_id: Decimal(1), good_b.event_id: Decimal(2)}


def test_grouped_payments_reach_the_wal_as_outbox_inserts_in_order(store: EventStore,
                                                                    db) -> None:
    """What Debezium reads: one outbox INSERT per accepted event, in arrival order."""
    user = known_user()
    events = [_payment(unique("ev"), user, str(n + 1)) for n in range(5)]
    slot = unique("test_outbox").replace("-", "_")
    # Only Debezium's role may replicate (the owner may not): the slot is read as it.
    cdc = connect(database_url("cdc"), application_name="paystream-test-wal")
    cdc.autocommit = True
    with cdc, cdc.cursor() as cur:
        cur.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding', true)",
                    (slot,))  # temporary: dropped with this session
        store.commit_group([PaymentWrite(e, "t") for e in events[:2]]
                           + [PaymentWrite(events[0], "t")]  # a duplicate: no message
                           + [PaymentWrite(e, "t") for e in events[2:]])
        cur.execute("SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL)"
                    " WHERE data LIKE 'table public.outbox: INSERT:%%'"
                    " AND data LIKE %s", (slot, f"%{user}%"))
        inserts = [row[0] for row in cur.fetchall()]
    cdc.close()
    order = [next(e.event_id for e in events if f"'{e.event_id}'" in i) for i in inserts]
    assert order == [e.event_id for e in events]
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM outbox WHERE aggregateid = %s", (user,))
        assert cur.fetchone()[0] == 0  # inserted and deleted in the same transaction


def test_a_group_postgres_rolled_back_at_commit_is_never_acknowledged(store: EventStore,
                                                                       db) -> None:
    """COMMIT of a failed transaction answers ROLLBACK without an error: caught."""
    user = known_user()
    event = _payment(unique("ev"), user, "1")

    def swallows_an_error(cur: Cursor) -> str:
        _write(event)(cur)
        with contextlib.suppress(psycopg2.DataError):  # this work hides that ...
            cur.execute("SELECT 1/0")  # ... the transaction is now failed
        return "looks fine"

    with pytest.raises(DatabaseUnavailableError):
        store.commit_group([swallows_an_error])
    assert _amounts(db, user) == {}
