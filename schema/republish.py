"""CDC across a failover: publish again, from the database's own state, what the old
primary's replication slot may not have confirmed to Kafka (on PostgreSQL 15 a logical
slot does not move to the standby). Run by the failover follower on the new primary,
after it created the new slot (stack/failover_follower.py); the window it covers is in
docs/operations.md#cdc-across-a-failover.

Every event still `received` (committed, not yet applied by the ledger) gets an outbox
row again, with its stored payload and trace id: the ledger is idempotent by event id,
so an event that did reach Kafka through the old slot is absorbed as a duplicate.
"""

from __future__ import annotations

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
