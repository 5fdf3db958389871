"""Withdrawals racing deposits of the same users, applied by two processes at once."""

from __future__ import annotations

import json
import random
import threading
from decimal import Decimal

from paystream.notify.intents import IntentType, parse_batch
from paystream.notify.seal import process_sealer
from paystream.schema.events import NOTIFICATIONS_TOPIC, EventType, PaymentEvent
from tests.support.consumers import (
    create_topic,
    create_users,
    drained,
    produce,
    read_all,
    store_events,
    wait_until,
    wire_message,
)
from tests.support.ids import unique

INITIAL = Decimal(50)


def test_withdrawals_racing_deposits_never_overdraw(db, pool) -> None:
    # Deposits and withdrawals of the same users arrive on two topics consumed by two
    # processes: both lock and update the same balance rows at the same time.
    deposits_topic, withdrawals_topic = unique("race-dep"), unique("race-wd")
    dep_group, wd_group, dlq = unique("race-dep-g"), unique("race-wd-g"), unique("race-dlq")
    create_topic(deposits_topic)
    create_topic(withdrawals_topic)
    users = [unique("race-user") for _ in range(6)]
    with db.cursor() as cur:
        create_users(cur, users)
        cur.execute("INSERT INTO balances (user_id, asset, balance)"
                    " SELECT unnest(%s::text[]), 'USDC', %s", (users, INITIAL))
    rng = random.Random(4)
    prefix = unique("race-ev")
    deposits = [PaymentEvent(f"{prefix}-d{i}", EventType.DEPOSIT, users[i % 6], "USDC",
                             Decimal(rng.randint(1, 2000)) / 100, "test") for i in range(1500)]
    withdrawals = [PaymentEvent(f"{prefix}-w{i}",
                                EventType.WITHDRAWAL_FEE if i % 7 == 0 else EventType.WITHDRAWAL,
                                users[i % 6], "USDC", Decimal(rng.randint(1, 3000)) / 100,
                                "test") for i in range(1500)]
    with db.cursor() as cur:  # as the ingest does: the ledger credits only these
        store_events(cur, deposits + withdrawals)
    pool.start("ledger", topic=deposits_topic, group=dep_group, dlq_topic=dlq,
               extra_args=["--batch-size", "50", "--batch-timeout", "0.02"])
    pool.start("ledger", topic=withdrawals_topic, group=wd_group, dlq_topic=dlq,
               extra_args=["--batch-size", "50", "--batch-timeout", "0.02"])

    lowest: list[Decimal] = []
    done = threading.Event()

    def watch() -> None:  # the floor, observed while both processes write
        from paystream.schema.db import connect, database_url
        conn = connect(database_url("owner"))
        conn.autocommit = True
        with conn.cursor() as cur:
            while not done.is_set():
                cur.execute("SELECT min(balance) FROM balances WHERE user_id = ANY(%s)",
                            (users,))
                lowest.append(cur.fetchone()[0])
        conn.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    feeders = [threading.Thread(target=produce, args=(t, [wire_message(e) for e in evs]))
               for t, evs in ((deposits_topic, deposits), (withdrawals_topic, withdrawals))]
    for f in feeders:
        f.start()
    for f in feeders:
        f.join(60)
    try:
        wait_until(lambda: drained(dep_group, deposits_topic)
                   and drained(wd_group, withdrawals_topic), 120, "both groups drained")
    except AssertionError:
        raise AssertionError(pool.logs()) from None
    finally:
        done.set()
        watcher.join(10)
    assert lowest and min(lowest) >= 0

    ids = [e.event_id for e in deposits + withdrawals]
    with db.cursor() as cur:
        cur.execute("SELECT b.user_id, b.balance, coalesce(sum(j.delta), 0)"
                    " FROM balances b LEFT JOIN user_entries j"
                    "   ON j.user_id = b.user_id AND j.asset = b.asset AND j.book = 'available'"
                    " WHERE b.user_id = ANY(%s) GROUP BY b.user_id, b.balance", (users,))
        for user, balance, journal in cur.fetchall():
            assert balance >= 0
            assert balance == INITIAL + journal, user
        cur.execute("SELECT outcome, count(*) FROM processed_events WHERE event_id = ANY(%s)"
                    " GROUP BY 1", (ids,))
        outcomes = dict(cur.fetchall())
        cur.execute("SELECT count(*) FROM user_entries"
                    " WHERE book = 'available' AND source_event_id = ANY(%s)", (ids,))
        journal_rows = cur.fetchone()[0]
    assert sum(outcomes.values()) == 3000
    assert journal_rows == outcomes["applied"]  # deposits all applied, debits when funded
    rejected = outcomes.get("insufficient_funds", 0)
    assert 0 < rejected < 1500  # the race really happened on both sides

    # One notification intent per rejected withdrawal, through the outbox and Debezium.
    def notified() -> list[str]:
        found = []
        for m in read_all(NOTIFICATIONS_TOPIC):
            intents, _ = parse_batch(json.loads(m.value()), process_sealer())
            found += [i.data["event_id"] for i, _ in intents
                      if i.data["event_id"].startswith(prefix)
                      and i.type is IntentType.WITHDRAWAL_REJECTED]
        return found

    wait_until(lambda: len(notified()) >= rejected, 60, "the rejection notifications",
               interval_s=1)
    seen = notified()
    assert len(seen) == len(set(seen)) == rejected
    for proc in pool.procs:
        assert proc.terminate() == 0, proc.tail()
