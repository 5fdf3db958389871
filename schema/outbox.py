"""The transactional outbox write: the one place events enter the pipeline.

Both ingest (new events) and the DLQ replay (events sent again) write here, inside the
caller's transaction, so an event row and its outbox row commit together or not at all.
The outbox row is inserted and deleted in the same transaction: Debezium reads the
insert from the WAL, the Event Router ignores the delete, the table stays empty.
"""

from __future__ import annotations

import json
import uuid
from enum import StrEnum
from typing import Any

from schema.events import PAYMENTS_AGGREGATE, PaymentEvent


class WriteOutcome(StrEnum):
    ACCEPTED = "accepted"    # new event: event row and outbox row written
    DUPLICATE = "duplicate"  # same event id, same content: nothing written
    CONFLICT = "conflict"    # same event id, other content: caller must roll back


def emit(cur, *, aggregatetype: str, aggregateid: str, event_type: str, event_id: str,
         payload: dict[str, Any], trace_id: str) -> uuid.UUID:
    """Insert and delete one outbox row in the caller's transaction; return its id."""
    message_id = uuid.uuid4()
    cur.execute(
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, event_id, payload, trace_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (str(message_id), aggregatetype, aggregateid, event_type, event_id,
         json.dumps(payload, separators=(",", ":")), trace_id),
    )
    # A separate DELETE, not a data-modifying CTE: Debezium must see the INSERT.
    cur.execute("DELETE FROM outbox WHERE id = %s", (str(message_id),))
    return message_id


def write_event(cur, event: PaymentEvent, trace_id: str) -> WriteOutcome:
    """Record a payment event and publish it through the outbox, once per event id."""
    wire = event.to_wire()
    content_hash = event.content_hash()
    cur.execute(
        "INSERT INTO payment_events (event_id, provider, event_type, user_id, asset, amount,"
        " content_hash, trace_id, payload) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (event_id) DO NOTHING RETURNING event_id",
        (event.event_id, event.provider, event.event_type.value, event.user_id, event.asset,
         wire["amount"], content_hash, trace_id, json.dumps(wire, separators=(",", ":"))),
    )
    if cur.fetchone() is None:
        cur.execute("SELECT content_hash FROM payment_events WHERE event_id = %s",
                    (event.event_id,))
        row = cur.fetchone()
        same = row is not None and row[0] == content_hash
        return WriteOutcome.DUPLICATE if same else WriteOutcome.CONFLICT
    emit(cur, aggregatetype=PAYMENTS_AGGREGATE, aggregateid=event.user_id,
         event_type=event.event_type.value, event_id=event.event_id, payload=wire,
         trace_id=trace_id)
    return WriteOutcome.ACCEPTED
