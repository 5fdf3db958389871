"""The DLQ mirror (group `dlq-mirror`): the DLQ topic as rows of dead_letter_queue.

A row is keyed by the dead message's origin (source topic, partition, offset), so a
message dead-lettered twice (its batch was redelivered) stays one row whose `attempts`
grows by one entry per distinct DLQ record; a redelivered DLQ record adds nothing. The
first time an origin is seen, its payment event moves to dead_lettered through the one
transition function, but only if the dead letter's content is the stored event's (same
content hash): a forged record naming a real event id is kept as a row, and the real
event's status is left alone (a replay of that row is then refused too).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TypedDict

import structlog

from paystream.consumers.dead_letters import send as dlq
from paystream.consumers.handler import BatchResult
from paystream.consumers.records import Record, printable
from paystream.schema import stored_events
from paystream.schema.db import Connection, Cursor, DbRole
from paystream.schema.events import EventError, parse_wire
from paystream.schema.status import EventStatus, transition

log = structlog.get_logger("consumers.dlq_mirror")


class MirrorRow(TypedDict):
    """The parameters of one dead_letter_queue upsert (JSON columns as JSON text)."""

    source_topic: str
    source_partition: int
    source_offset: int
    message_key: str | None
    headers: str
    payload: str | None
    event_id: str | None
    error_reason: str
    error_detail: str
    attempts: str
    # [{"dlq_partition", "dlq_offset"}]: recognises a redelivered DLQ record.
    dlq_position: str


class DlqMirrorHandler:
    name = "dlq-mirror"
    db_role: DbRole = "mirror"

    def apply(self, cur: Cursor, records: Sequence[Record]) -> BatchResult:
        result = BatchResult()
        dead_lettered: list[tuple[str, str]] = []  # (event id, the dead letter's hash)
        for record in records:
            row = mirror_row(record)
            cur.execute(
                "INSERT INTO dead_letter_queue (source_topic, source_partition, source_offset,"
                " message_key, headers, payload, event_id, error_reason, error_detail,"
                " attempts) VALUES (%(source_topic)s, %(source_partition)s, %(source_offset)s,"
                " %(message_key)s, %(headers)s, %(payload)s, %(event_id)s, %(error_reason)s,"
                " %(error_detail)s, %(attempts)s)"
                " ON CONFLICT (source_topic, source_partition, source_offset) DO UPDATE SET"
                "   attempts = dead_letter_queue.attempts || EXCLUDED.attempts,"
                "   error_reason = EXCLUDED.error_reason, error_detail = EXCLUDED.error_detail,"
                "   last_seen_at = now()"
                " WHERE NOT dead_letter_queue.attempts @> %(dlq_position)s"
                " RETURNING id, (xmax = 0) AS inserted",
                row,
            )
            found = cur.fetchone()
            if found is None:
                result.outcomes["mirror_duplicate"] += 1
                continue
            row_id, inserted = found
            result.outcomes["mirrored" if inserted else "mirror_attempt_added"] += 1
            if inserted and row["event_id"]:
                claimed = content_hash_of(record, row["event_id"])
                if claimed is not None:
                    dead_lettered.append((row["event_id"], claimed))
            log.info("dead_letter_mirrored", id=row_id, reason=row["error_reason"],
                     trace_id=record.header("trace_id"), event_id=row["event_id"],
                     source=f"{row['source_topic']}[{row['source_partition']}]"
                            f"@{row['source_offset']}")
        stored = stored_events.content_hashes(cur, sorted({e for e, _ in dead_lettered}))
        matching = sorted({e for e, h in dead_lettered if stored.get(e) == h})
        result.outcomes["mirror_content_mismatch"] += len(dead_lettered) - len(matching)
        transition(cur, matching, EventStatus.DEAD_LETTERED)
        if matching:  # the console's provider filter reads it from the dead letter
            cur.execute("UPDATE dead_letter_queue d SET provider = p.provider"
                        " FROM payment_events p WHERE p.event_id = d.event_id"
                        " AND d.event_id = ANY(%s) AND d.provider IS NULL", (matching,))
        return result

    def after_batch(self, connection: Callable[[], Connection]) -> None:
        """Nothing to do between batches: the mirror keeps no periodic checks."""


def mirror_row(record: Record) -> MirrorRow:
    """The dead_letter_queue row of one DLQ record (pure: unit-tested)."""
    headers = record.header_map()
    origin = record.origin
    try:
        source = (headers[dlq.H_SOURCE_TOPIC], int(headers[dlq.H_SOURCE_PARTITION]),
                  int(headers[dlq.H_SOURCE_OFFSET]))
        reason = headers.get(dlq.H_REASON) or "unknown"
        detail = headers.get(dlq.H_DETAIL) or ""
    except (KeyError, ValueError):
        # Not written by our DLQ producer: keep it, addressed by its own position.
        source = (origin.topic, origin.partition, origin.offset)
        reason, detail = "unknown_origin", "DLQ record without dlq.source.* headers"
    try:
        attempts = json.loads(headers.get(dlq.H_ATTEMPTS) or "[]")
        if not isinstance(attempts, list):
            attempts = []
    except ValueError:
        attempts = []
    position = {"dlq_partition": origin.partition, "dlq_offset": origin.offset}
    # The last attempt is this dead-lettering; it is tagged with the DLQ position so a
    # redelivered DLQ record is recognised and not appended twice.
    attempts = [a for a in attempts if isinstance(a, dict)]
    if attempts:
        attempts[-1] = {**attempts[-1], **position}
    else:
        attempts = [{"reason": reason, "detail": detail, **position}]
    original = {k: _clean(v) for k, v in headers.items() if k not in dlq.DLQ_HEADERS}
    return {
        "source_topic": source[0],
        "source_partition": source[1],
        "source_offset": source[2],
        "message_key": printable(record.key),
        "headers": json.dumps(original),
        "payload": printable(record.value),
        "event_id": _clean(original.get("event_id") or "") or _payload_event_id(record) or None,
        "error_reason": _clean(reason),
        "error_detail": _clean(detail),
        "attempts": json.dumps(attempts),
        "dlq_position": json.dumps([position]),
    }


def content_hash_of(record: Record, event_id: str) -> str | None:
    """The content hash of the event the dead letter carries, if it is event `event_id`
    (None: its value is not such an event, so it cannot be the stored one)."""
    try:
        event = parse_wire(json.loads(record.value or b""))
    except (UnicodeDecodeError, ValueError, RecursionError, EventError):
        return None  # RecursionError: JSON nested too deep to read
    return event.content_hash() if event.event_id == event_id else None


def _payload_event_id(record: Record) -> str | None:
    try:
        obj = json.loads(record.value or b"")
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    value = obj.get("event_id") if isinstance(obj, dict) else None
    return _clean(value) if isinstance(value, str) else None


def _clean(text: str) -> str:
    # Postgres text and jsonb cannot hold NUL.
    return text.replace("\x00", "\\x00")
