"""CDC across a failover: publish again, from the database's own state, what the old
primary's replication slot may not have confirmed to Kafka (on PostgreSQL 15 a logical
slot does not move to the standby). Run by the failover follower on the new primary,
after it created the new slot (stack/failover_follower.py); the window it covers is in
docs/operations.md#cdc-across-a-failover.

Every event still `received` (committed, not yet applied by the ledger) gets an outbox
row again, with its stored payload and trace id: the ledger is idempotent by event id,
so an event that did reach Kafka through the old slot is absorbed as a duplicate. So
does every finality settlement the ledger has not applied yet (its deposit still
finalizing, crediting, reorging or reversing), from the message the watcher kept with
the deposit (chain_deposits.settlement).
"""

from __future__ import annotations

from paystream.schema.chain_deposits import AWAITING_SETTLEMENT
from paystream.schema.db import Cursor
from paystream.schema.events import PAYMENTS_AGGREGATE
from paystream.schema.outbox import publish

BATCH = 1000


def received_events(cur: Cursor) -> int:
    """Outbox rows for every `received` event, in the order they were received, in the
    caller's transaction; how many."""
    cur.execute("SELECT e.event_id, e.user_id, e.event_type, e.payload, e.trace_id"
                " FROM event_status s JOIN payment_events e USING (event_id)"
                " WHERE s.status = 'received' ORDER BY e.received_at, e.event_id")
    count = 0
    while rows := cur.fetchmany(BATCH):
        publish(cur.connection.cursor(), PAYMENTS_AGGREGATE,
                [{"aggregateid": user_id, "type": event_type, "event_id": event_id,
                  "payload": payload, "trace_id": trace_id}
                 for event_id, user_id, event_type, payload, trace_id in rows])
        count += len(rows)
    return count


def unsettled_settlements(cur: Cursor) -> int:
    """Outbox rows for every settlement the watcher emitted and the ledger has not
    applied, in the order they were decided, in the caller's transaction; how many.
    A deposit decided by a release before migration 0041 kept none: it is not found."""
    cur.execute("SELECT user_id, settlement, trace_id FROM chain_deposits"
                " WHERE state = ANY(%s) AND settlement IS NOT NULL"
                " ORDER BY decided_at, event_id", ([s.value for s in AWAITING_SETTLEMENT],))
    count = 0
    while rows := cur.fetchmany(BATCH):
        publish(cur.connection.cursor(), PAYMENTS_AGGREGATE,
                [{"aggregateid": user_id, "type": wire["event_type"],
                  "event_id": wire["event_id"], "payload": wire, "trace_id": trace_id}
                 for user_id, wire, trace_id in rows])
        count += len(rows)
    return count
