"""The ledger hands a batch over as soon as a record is in hand, and still batches under
load (docs/scaling.md): a lone record must not wait for a batch to fill or for the batch
timeout, and a backlog is applied in large batches. Real broker, Postgres and
`paystream consume ledger` processes."""

from __future__ import annotations

import time

from tests.support.consumers import (
    create_topic,
    create_users,
    drained,
    make_events,
    produce,
    store_events,
    wait_until,
    wire_message,
)
from tests.support.ids import unique

BATCH_TIMEOUT_S = 5.0  # far above what a lone record may wait


def _applied(db, event_id: str) -> bool:
    """Final: applied, or rejected (a withdrawal larger than the balance)."""
    with db.cursor() as cur:
        cur.execute("SELECT status FROM event_status WHERE event_id = %s", (event_id,))
        return cur.fetchone() in (("applied",), ("rejected",))


def test_a_lone_record_is_applied_without_waiting_for_the_batch_timeout(db, pool) -> None:
    topic, group, dlq = unique("batch-topic"), unique("batch-group"), unique("batch-dlq")
    create_topic(topic)
    user = unique("batch-user")
    events = make_events(unique("batch-ev"), [user], 3)
    with db.cursor() as cur:
        create_users(cur, [user])
        store_events(cur, events)
    proc = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq,
                      extra_args=["--batch-timeout", str(BATCH_TIMEOUT_S)])
    # The first record also waits for the group to form: time the later ones.
    produce(topic, [wire_message(events[0])])
    wait_until(lambda: _applied(db, events[0].event_id), 60, "the first record applied")
    waits = []
    for event in events[1:]:
        time.sleep(BATCH_TIMEOUT_S + 0.5)  # the consumer is idle inside consume() now
        sent = time.monotonic()
        produce(topic, [wire_message(event)])
        wait_until(lambda e=event: _applied(db, e.event_id), 30, "a lone record applied")
        waits.append(time.monotonic() - sent)
    assert max(waits) < BATCH_TIMEOUT_S / 2, (waits, proc.tail())
    assert proc.terminate() == 0, proc.tail()


def test_a_backlog_is_applied_in_full_batches(db, pool) -> None:
    topic, group, dlq = unique("batch-topic"), unique("batch-group"), unique("batch-dlq")
    create_topic(topic)
    users = [unique("batch-user") for _ in range(12)]
    events = make_events(unique("batch-ev"), users, 6000)
    with db.cursor() as cur:
        create_users(cur, users)
        store_events(cur, events)
    produce(topic, [wire_message(e) for e in events])
    proc = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq,
                      extra_args=["--batch-size", "1000"])
    wait_until(lambda: drained(group, topic), 120, "the backlog applied")
    assert proc.terminate() == 0, proc.tail()
    sizes = [entry["size"] for entry in proc.events("batch_committed")]
    assert sum(sizes) == len(events)
    assert max(sizes) == 1000 and len(events) / len(sizes) >= 300, sizes
