"""The transactional outbox write: the one place events enter the pipeline.

Both ingest (new events) and the DLQ replay (events sent again) write here, inside the
caller's transaction, so an event row, its status row (event_status, `received`) and its
outbox row commit together or not at all.
The outbox row is inserted and deleted in the same transaction: Debezium reads the
insert from the WAL, the Event Router ignores the delete, the table stays empty.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import orjson

from paystream.schema.db import Cursor
from paystream.schema.events import PAYMENTS_AGGREGATE, PaymentEvent, wire_hash

# The advisory lock key of the outbox's failover fence (migration 0042): every insert
# into the outbox takes it shared or is refused (40001); `fence` takes it exclusively.
FENCE_KEY = 7401766021


def fence(cur: Cursor) -> None:
    """Refuse every other transaction's outbox insert (serialization_failure, retryable)
    until the caller's transaction ends; waits for the inserts in flight to commit. The
    failover follower holds it while the new primary's slot is created and what the old
    one lost is published again, so no message commits in between, ahead of them."""
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (FENCE_KEY,))


class WriteOutcome(StrEnum):
    ACCEPTED = "accepted"    # new event: event row and outbox row written
    DUPLICATE = "duplicate"  # same event id, same content: nothing written
    CONFLICT = "conflict"    # same event id, other content: caller must roll back


# The tail of both writes' one statement: each payment_events row the INSERT named `e`
# wrote gets its event_status row (`received`, status_changed_at = received_at: one
# transaction's now()) in the same statement, so an event never exists without its
# status and the ingest pays no extra round trip. The statement returns e's ids, not the
# status rows' (RETURNING there would need SELECT on event_status, which the ingest has
# no use for).
_STATUS_ROWS = ("s AS (INSERT INTO event_status (event_id) SELECT event_id FROM e)"
                " SELECT event_id FROM e")


def emit(cur: Cursor, *, aggregatetype: str, aggregateid: str, event_type: str, event_id: str,
         payload: dict[str, Any], trace_id: str) -> uuid.UUID:
    """One outbox message in the caller's transaction: `publish` of one, the one way a
    message is written. Returns its id."""
    message_id = uuid.uuid4()
    publish(cur, aggregatetype, [{"id": str(message_id), "aggregateid": aggregateid,
                                  "type": event_type, "event_id": event_id,
                                  "payload": payload, "trace_id": trace_id}])
    return message_id


def write_event(cur: Cursor, event: PaymentEvent, trace_id: str) -> WriteOutcome:
    """Record a payment event and publish it through the outbox, once per event id:
    `write_events` of one, the one way an event is written."""
    return write_events(cur, [(event, trace_id)])[0]


def write_events(cur: Cursor, events: Sequence[tuple[PaymentEvent, str]]) -> list[WriteOutcome]:
    """Record each (event, trace_id) in order and publish it through the outbox, once per
    event id, in three round trips for them all.

    The outcomes, the rows and the outbox messages (in the same order) are those of
    writing one pair at a time: an event id seen twice is accepted the first
    time, then a duplicate or a conflict. A CONFLICT writes nothing here either (ON
    CONFLICT DO NOTHING), so there is nothing for the caller to roll back for it. The
    ingest's group commit uses this to pay one round trip per statement per group
    instead of per event. A constraint error fails the whole statement: the caller
    then falls back to write_event per event, each in its own savepoint.

    The rows travel as one JSON document per statement, unpacked by Postgres
    (jsonb_to_recordset, rows in document order): this is the ingest's hottest loop, and
    serialising one document costs the Python side half of what quoting a VALUES list,
    or one array per column, does (bench/ingest_bench.py).
    """
    if not events:
        return []
    wires = [event.to_wire() for event, _ in events]
    hashes = [wire_hash(w) for w in wires]
    cur.execute(
        "WITH e AS (INSERT INTO payment_events (event_id, provider, event_type, user_id,"
        " asset, amount, content_hash, trace_id, payload)"
        " SELECT event_id, provider, event_type, user_id, asset, amount, content_hash,"
        " trace_id, payload FROM jsonb_to_recordset(%s::jsonb) AS r(event_id text,"
        " provider text, event_type text, user_id text, asset text, amount numeric,"
        " content_hash text, trace_id text, payload jsonb)"
        " ON CONFLICT (event_id) DO NOTHING RETURNING event_id), " + _STATUS_ROWS,
        (_json_rows([{"event_id": e.event_id, "provider": e.provider,
                      "event_type": w["event_type"], "user_id": e.user_id, "asset": e.asset,
                      "amount": w["amount"], "content_hash": h, "trace_id": t, "payload": w}
                     for (e, t), w, h in zip(events, wires, hashes, strict=True)]),))
    inserted = {row[0] for row in cur.fetchall()}
    # Rows are inserted in document order, so a repeated id was inserted at its first
    # place and conflicted (DO NOTHING) after it.
    first_hash: dict[str, str] = {}
    for (event, _), content_hash in zip(events, hashes, strict=True):
        if event.event_id in inserted:
            first_hash.setdefault(event.event_id, content_hash)
    known = sorted({e.event_id for e, _ in events} - inserted)
    if known:
        cur.execute("SELECT event_id, content_hash FROM payment_events"
                    " WHERE event_id = ANY(%s)", (known,))
        first_hash.update(cur.fetchall())
    outcomes: list[WriteOutcome] = []
    messages: list[dict[str, Any]] = []
    accepted: set[str] = set()
    for (event, trace_id), wire, content_hash in zip(events, wires, hashes, strict=True):
        if event.event_id in inserted and event.event_id not in accepted:
            accepted.add(event.event_id)
            outcomes.append(WriteOutcome.ACCEPTED)
            messages.append({"id": str(uuid.uuid4()), "aggregateid": event.user_id,
                             "type": wire["event_type"], "event_id": event.event_id,
                             "payload": wire, "trace_id": trace_id})
        elif first_hash.get(event.event_id) == content_hash:
            outcomes.append(WriteOutcome.DUPLICATE)
        else:
            outcomes.append(WriteOutcome.CONFLICT)
    publish(cur, PAYMENTS_AGGREGATE, messages)
    return outcomes


def publish(cur: Cursor, aggregatetype: str, messages: Sequence[dict[str, Any]]) -> None:
    """Outbox messages in one round trip: each a dict of aggregateid, type, event_id,
    payload (a JSON object) and trace_id (an `id` is added if absent)."""
    if not messages:
        return
    rows = [m if "id" in m else {**m, "id": str(uuid.uuid4())} for m in messages]
    # INSERT then DELETE: two statements (Debezium must see each INSERT, as in emit),
    # sent in one message, so the caller pays one round trip for its outbox.
    cur.execute(
        "INSERT INTO outbox (id, aggregatetype, aggregateid, type, event_id, payload,"
        " trace_id) SELECT id, %s, aggregateid, type, event_id,"
        # A payload that is JSON's null comes out of the record set as SQL NULL.
        " coalesce(payload, 'null'::jsonb), trace_id"
        " FROM jsonb_to_recordset(%s::jsonb) AS m(id uuid, aggregateid text, type text,"
        " event_id text, payload jsonb, trace_id text);"
        " DELETE FROM outbox WHERE id = ANY(%s::uuid[])",
        (aggregatetype, _json_rows(rows), [m["id"] for m in rows]))


def _json_rows(rows: list[dict[str, Any]]) -> str:
    try:
        return orjson.dumps(rows).decode()
    except TypeError:  # an int beyond 64 bits: json.dumps writes it exactly
        return json.dumps(rows, separators=(",", ":"))
