"""The stored event: what a record on the payment topic is checked against.

Only paystream's outbox writes may credit. The ingest (schema.outbox.write_event /
write_events) and a DLQ replay (consumers.dead_letters.replay) put an event on the
payment topic only together with its payment_events row, whose content_hash is
PaymentEvent.content_hash() of the event as written; the finality watcher's settlement
events have no payment_events row: they are checked against chain_deposits instead.
So a record is believed only if the row exists, holds the same content hash, and has a
status (in event_status) that explains why the record is on the topic (`judge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from paystream.schema import visibility
from paystream.schema.db import Cursor
from paystream.schema.pgarray import text_array
from paystream.schema.status import EventStatus

# Statuses the ledger has written once it processed the event (final, or waiting on
# its chain deposit's settlement): a record of such an event is a redelivery only while
# processed_events still holds its outcome.
PROCESSED_STATUSES = frozenset({
    EventStatus.APPLIED, EventStatus.REJECTED, EventStatus.PENDING_FINALITY,
    EventStatus.CREDITED, EventStatus.REORGED, EventStatus.REVERSED})

UNKNOWN_EVENT = "unknown_event"
CONTENT_MISMATCH = "content_mismatch"
STATUS_CONFLICT = "status_conflict"


@dataclass(frozen=True, slots=True)
class StoredEvent:
    content_hash: str
    status: EventStatus
    # Its idempotency key is in processed_events (only looked up when the status is not
    # `received`: the hot path never pays for it).
    processed: bool


def suspects(cur: Cursor, wanted: Sequence[tuple[str, str, str]]
             ) -> tuple[dict[str, StoredEvent | None], dict[str, date]]:
    """Of `wanted` (event id, idempotency key, content hash) triples, those whose stored
    row is missing (None), holds another content hash, or is past `received`, by
    idempotency key; and the day each stored row was received on (UTC), by idempotency
    key: the day its claim is filed under (schema/processed_events.py). One query: a
    join on unnest by the primary keys of payment_events and event_status (the outbox
    write inserts both rows together; an event without its status row is not believed:
    None); an honest first delivery sends back its key and day alone, and
    processed_events is probed only for rows past `received` (a redelivery)."""
    if not wanted:
        return {}, {}
    cur.execute(
        "SELECT k, day, bad, CASE WHEN bad THEN h END, CASE WHEN bad THEN st END,"
        " CASE WHEN st <> 'received' THEN EXISTS"
        "  (SELECT 1 FROM processed_events q WHERE q.idempotency_key = k) END"
        " FROM (SELECT x.k, (p.received_at AT TIME ZONE 'UTC')::date AS day,"
        "  p.content_hash AS h, s.status AS st, p.event_id IS NULL OR s.event_id IS NULL"
        "  OR p.content_hash <> x.h OR s.status <> 'received' AS bad"
        "  FROM unnest(%s::text[], %s::text[], %s::text[]) AS x(e, k, h)"
        "  LEFT JOIN payment_events p ON p.event_id = x.e"
        "  LEFT JOIN event_status s ON s.event_id = x.e) AS y",
        (text_array([w[0] for w in wanted]), text_array([w[1] for w in wanted]),
         text_array([w[2] for w in wanted])))
    suspect: dict[str, StoredEvent | None] = {}
    days: dict[str, date] = {}
    for key, day, bad, content_hash, status, processed in cur.fetchall():
        if day is not None:
            days[key] = day
        if bad:
            suspect[key] = (None if content_hash is None or status is None
                            else StoredEvent(content_hash, EventStatus(status), bool(processed)))
    return suspect, days


def visible_suspects(cur: Cursor, wanted: Sequence[tuple[str, str, str]]
                     ) -> tuple[dict[str, StoredEvent | None], dict[str, date]]:
    """`suspects`, with the rows missing looked up again after each of visibility.waits
    before they are judged missing (a record can come before its row is visible)."""
    suspect, days = suspects(cur, wanted)
    if not _missing(wanted, suspect):
        return suspect, days
    for _ in visibility.waits(cur):
        missing = _missing(wanted, suspect)
        if not missing:
            break
        again, seen = suspects(cur, missing)
        days.update(seen)
        for _event_id, key, _hash in missing:
            if key in again:
                suspect[key] = again[key]
            else:  # visible now, and as the record says
                del suspect[key]
    return suspect, days


def _missing(wanted: Sequence[tuple[str, str, str]],
             suspect: dict[str, StoredEvent | None]) -> list[tuple[str, str, str]]:
    return [w for w in wanted if w[1] in suspect and suspect[w[1]] is None]


def judge(event_id: str, content_hash: str, row: StoredEvent | None
          ) -> tuple[str, str] | None:
    """Why a record of `event_id` with `content_hash` must not be applied, as (reason,
    detail), or None when it may (pure: unit-tested).

    `received`: the outbox sent it and the ledger has not decided it yet (a DLQ replay
    moves a dead letter back to `received` before sending it again). A processed status
    with its outcome on record: a redelivery, which the claim turns into a duplicate. A
    processed status without it: no redelivery explains the record (Kafka keeps records
    7 days, housekeeping forgets outcomes after 14). `dead_lettered`: it waits for an
    operator's replay, which sends it again itself.
    """
    if row is None:
        return UNKNOWN_EVENT, f"no payment event {event_id!r} was recorded"
    if row.content_hash != content_hash:
        return CONTENT_MISMATCH, (f"{event_id}: content hash {content_hash[:16]}... is not"
                                  f" the recorded {row.content_hash[:16]}...")
    if row.status is EventStatus.RECEIVED:
        return None
    if row.status in PROCESSED_STATUSES and row.processed:
        return None
    if row.status is EventStatus.DEAD_LETTERED:
        return STATUS_CONFLICT, (f"{event_id} is dead_lettered: only `paystream dlq replay`"
                                 " sends it again")
    return STATUS_CONFLICT, (f"{event_id} is already {row.status} and no recorded outcome"
                             " explains a redelivery")


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """A payment_events row as the ingest wrote it: what a DLQ replay sends again."""

    content_hash: str
    status: EventStatus
    payload: dict[str, Any]
    trace_id: str


def recorded(cur: Cursor, event_id: str) -> RecordedEvent | None:
    """The stored event `event_id`, its status row locked FOR UPDATE (a replay moves
    its status; payment_events itself is never updated)."""
    cur.execute("SELECT p.content_hash, s.status, p.payload, p.trace_id"
                " FROM payment_events p JOIN event_status s USING (event_id)"
                " WHERE p.event_id = %s FOR UPDATE OF s", (event_id,))
    row = cur.fetchone()
    if row is None:
        return None
    return RecordedEvent(row[0], EventStatus(row[1]), row[2], row[3])


def content_hashes(cur: Cursor, event_ids: Sequence[str]) -> dict[str, str]:
    """The recorded content hash of each of `event_ids` that has a row."""
    if not event_ids:
        return {}
    cur.execute("SELECT event_id, content_hash FROM payment_events WHERE event_id = ANY(%s)",
                (list(event_ids),))
    return {row[0]: row[1] for row in cur.fetchall()}
