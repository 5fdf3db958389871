"""Operating the dead letters: list, show, and replay one after a person fixed its cause.

A replay sends the event back through the transactional outbox, with the same event id
(so the ledger's idempotency still holds), and moves its status dead_lettered ->
received through the one transition function, all in one transaction. It refuses what
cannot or must not run again: a payload that does not parse, an event the ledger has
already processed, a row already replayed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from paystream.schema import processed_events
from paystream.schema.db import Cursor
from paystream.schema.events import PAYMENTS_AGGREGATE, EventError, parse_wire
from paystream.schema.outbox import emit
from paystream.schema.status import EventStatus, transition

LIST_COLUMNS = ("id", "status", "error_reason", "event_id", "source_topic",
                "source_partition", "source_offset", "last_seen_at")


class ReplayRefused(Exception):  # noqa: N818 - a refusal, not an error of the program
    """The dead letter must not be replayed; the message says why."""


@dataclass(frozen=True)
class Replayed:
    dlq_id: int
    event_id: str
    outbox_id: str


def list_dead_letters(cur: Cursor, status: str | None = "open", limit: int = 50
                      ) -> list[dict[str, Any]]:
    where = "WHERE status = %s" if status else ""
    params: tuple[Any, ...] = (status, limit) if status else (limit,)
    cur.execute(f"SELECT {', '.join(LIST_COLUMNS)} FROM dead_letter_queue {where}"
                " ORDER BY id DESC LIMIT %s", params)
    return [dict(zip(LIST_COLUMNS, row, strict=True)) for row in cur.fetchall()]


def show_dead_letter(cur: Cursor, dlq_id: int) -> dict[str, Any] | None:
    cur.execute("SELECT * FROM dead_letter_queue WHERE id = %s", (dlq_id,))
    row = cur.fetchone()
    if row is None:
        return None
    columns = [d[0] for d in cur.description or ()]
    return dict(zip(columns, row, strict=True))


def replay(cur: Cursor, dlq_id: int) -> Replayed:
    """Send dead letter `dlq_id` back through the outbox in the caller's transaction."""
    cur.execute("SELECT status, payload, headers FROM dead_letter_queue WHERE id = %s"
                " FOR UPDATE", (dlq_id,))
    row = cur.fetchone()
    if row is None:
        raise ReplayRefused(f"no dead letter with id {dlq_id}")
    status, payload, headers = row
    if status != "open":
        raise ReplayRefused(f"dead letter {dlq_id} is {status}, not open")
    try:
        event = parse_wire(json.loads(payload or ""))
    except (ValueError, EventError) as exc:
        raise ReplayRefused(f"payload cannot be parsed ({exc}); fix the producer, "
                            "a replay would only dead-letter it again") from None
    done = processed_events.outcome_of(cur, event.event_id, event.event_type.value)
    if done is not None:
        raise ReplayRefused(f"event {event.event_id} ({event.event_type}) was already "
                            f"processed with outcome {done}")
    cur.execute("SELECT status FROM payment_events WHERE event_id = %s FOR UPDATE",
                (event.event_id,))
    current = cur.fetchone()
    if current is not None and current[0] in (EventStatus.APPLIED, EventStatus.REJECTED):
        raise ReplayRefused(f"event {event.event_id} is already {current[0]}")
    transition(cur, [event.event_id], EventStatus.RECEIVED)
    trace_id = (headers or {}).get("trace_id") or f"replay-{dlq_id}"
    outbox_id = emit(cur, aggregatetype=PAYMENTS_AGGREGATE, aggregateid=event.user_id,
                     event_type=event.event_type.value, event_id=event.event_id,
                     payload=event.to_wire(), trace_id=trace_id)
    cur.execute("UPDATE dead_letter_queue SET status = 'replayed', last_seen_at = now()"
                " WHERE id = %s", (dlq_id,))
    return Replayed(dlq_id, event.event_id, str(outbox_id))
