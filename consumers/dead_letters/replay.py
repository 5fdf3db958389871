"""Operating the dead letters: list, show, replay one after a person fixed its cause, or
discard one with the reason it will never be replayed.

A replay sends the STORED event (its payment_events row, as the ingest wrote it) back
through the transactional outbox, with the same event id (so the ledger's idempotency
still holds), and moves its status dead_lettered -> received through the one transition
function, all in one transaction. The dead letter's copy is only evidence: a replay
refuses a dead letter whose event has no stored row, whose content is not the stored
event's (a forged or mangled record: sending the stored event would credit something
that was never dead-lettered), or whose event is not dead_lettered (the mirror marks it
so only when the contents match), and one already processed or already replayed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from paystream.schema import processed_events, stored_events
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


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters a page or a bulk replay means; None matches anything.
    `provider` is the stored event's, recorded by the mirror (a dead letter with no stored
    event, or not the stored content, has none)."""

    status: str | None = "open"
    reason: str | None = None
    provider: str | None = None
    older_than_s: float | None = None
    newer_than_s: float | None = None

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition on `d` (dead_letter_queue) and its parameters."""
        parts: list[str] = ["TRUE"]
        params: list[Any] = []
        if self.status:
            parts.append("d.status = %s")
            params.append(self.status)
        if self.reason:
            parts.append("d.error_reason = %s")
            params.append(self.reason)
        if self.provider:
            parts.append("d.provider = %s")
            params.append(self.provider)
        if self.older_than_s is not None:
            parts.append("d.first_seen_at < now() - make_interval(secs => %s)")
            params.append(self.older_than_s)
        if self.newer_than_s is not None:
            parts.append("d.first_seen_at >= now() - make_interval(secs => %s)")
            params.append(self.newer_than_s)
        return " AND ".join(parts), params


def list_dead_letters(cur: Cursor, status: str | None = "open", limit: int = 50, *,
                      matching: DeadLetterFilter | None = None,
                      before_id: int | None = None) -> list[dict[str, Any]]:
    """Newest first: those `matching` (else of `status`), below `before_id` (a page).
    The page's ids come from an index alone (each filter's carries what it tests,
    migration 0029), then their rows by id: never a walk of every newer row's heap."""
    where, params = (matching or DeadLetterFilter(status=status)).where()
    if before_id is not None:
        where += " AND d.id < %s"
        params.append(before_id)
    columns = ", ".join(f"r.{c}" for c in LIST_COLUMNS)
    cur.execute(f"SELECT {columns} FROM dead_letter_queue r WHERE r.id = ANY(ARRAY("
                f"SELECT d.id FROM dead_letter_queue d WHERE {where}"
                " ORDER BY d.id DESC LIMIT %s)) ORDER BY r.id DESC", (*params, limit))
    return [dict(zip(LIST_COLUMNS, row, strict=True)) for row in cur.fetchall()]


def matching_ids(cur: Cursor, matching: DeadLetterFilter, limit: int) -> list[int]:
    """The ids of the dead letters `matching`, oldest first, at most `limit`."""
    where, params = matching.where()
    cur.execute(f"SELECT d.id FROM dead_letter_queue d WHERE {where} ORDER BY d.id"
                " LIMIT %s", (*params, limit))
    return [int(r[0]) for r in cur.fetchall()]


def show_dead_letter(cur: Cursor, dlq_id: int) -> dict[str, Any] | None:
    cur.execute("SELECT * FROM dead_letter_queue WHERE id = %s", (dlq_id,))
    row = cur.fetchone()
    if row is None:
        return None
    columns = [d[0] for d in cur.description or ()]
    return dict(zip(columns, row, strict=True))


def count_open_by_reason(cur: Cursor) -> list[tuple[str, int]]:
    """The open dead letters counted by reason, the 20 most common first."""
    cur.execute("SELECT error_reason, count(*) FROM dead_letter_queue"
                " WHERE status = 'open' GROUP BY error_reason ORDER BY 2 DESC LIMIT 20")
    return [(reason, count) for reason, count in cur.fetchall()]


def stored_event(cur: Cursor, event_id: str) -> tuple[str, str, Any] | None:
    """A dead letter's event as the ingest stored it: (status, provider, payload), or
    None when it has no stored row (what a replay would send)."""
    cur.execute("SELECT status, provider, payload"
                " FROM payment_events JOIN event_status USING (event_id)"
                " WHERE event_id = %s", (event_id,))
    found = cur.fetchone()
    return None if found is None else (found[0], found[1], found[2])


def replay(cur: Cursor, dlq_id: int) -> Replayed:
    """Send dead letter `dlq_id`'s stored event back through the outbox in the caller's
    transaction; raise ReplayRefused saying why not."""
    cur.execute("SELECT status, payload, event_id FROM dead_letter_queue WHERE id = %s"
                " FOR UPDATE", (dlq_id,))
    row = cur.fetchone()
    if row is None:
        raise ReplayRefused(f"no dead letter with id {dlq_id}")
    status, payload, event_id = row
    if status != "open":
        raise ReplayRefused(f"dead letter {dlq_id} is {status}, not open")
    if not event_id:
        raise ReplayRefused(f"dead letter {dlq_id} names no event: nothing stored to replay")
    stored = stored_events.recorded(cur, event_id)
    if stored is None:
        raise ReplayRefused(f"event {event_id} has no payment_events row: the outbox never"
                            " sent it, so there is nothing to replay")
    try:
        dead = parse_wire(json.loads(payload or ""))
    except (ValueError, EventError) as exc:
        raise ReplayRefused(f"dead letter {dlq_id}'s payload is not an event ({exc}), so it"
                            f" is not event {event_id} as stored; nothing replayed") from None
    if dead.event_id != event_id or dead.content_hash() != stored.content_hash:
        raise ReplayRefused(f"dead letter {dlq_id}'s content is not event {event_id} as"
                            " stored (another content hash): a forged or altered record")
    if stored.status is not EventStatus.DEAD_LETTERED:
        raise ReplayRefused(f"event {event_id} is {stored.status}, not dead_lettered")
    event = parse_wire(stored.payload)
    if event.content_hash() != stored.content_hash:
        raise ReplayRefused(f"event {event_id}'s stored payload does not match its stored"
                            " content hash; nothing replayed")
    done = processed_events.outcome_of(cur, event.event_id, event.event_type.value)
    if done is not None:
        raise ReplayRefused(f"event {event.event_id} ({event.event_type}) was already "
                            f"processed with outcome {done}")
    transition(cur, [event.event_id], EventStatus.RECEIVED)
    outbox_id = emit(cur, aggregatetype=PAYMENTS_AGGREGATE, aggregateid=event.user_id,
                     event_type=event.event_type.value, event_id=event.event_id,
                     payload=stored.payload, trace_id=stored.trace_id)
    cur.execute("UPDATE dead_letter_queue SET status = 'replayed', last_seen_at = now()"
                " WHERE id = %s", (dlq_id,))
    return Replayed(dlq_id, event.event_id, str(outbox_id))


def discard(cur: Cursor, dlq_id: int, reason: str) -> None:
    """Mark an open dead letter discarded, with why, in the caller's transaction: it will
    not be replayed (its event stays dead_lettered, its money never applied)."""
    reason = reason.strip()
    if not reason:
        raise ReplayRefused("say why it is discarded (--reason): it is the record")
    if len(reason) > 1000:
        raise ReplayRefused("a discard reason is at most 1000 characters")
    cur.execute("UPDATE dead_letter_queue SET status = 'discarded', discard_reason = %s,"
                " last_seen_at = now() WHERE id = %s AND status = 'open' RETURNING id",
                (reason, dlq_id))
    if cur.fetchone() is not None:
        return
    cur.execute("SELECT status FROM dead_letter_queue WHERE id = %s", (dlq_id,))
    row = cur.fetchone()
    if row is None:
        raise ReplayRefused(f"no dead letter with id {dlq_id}")
    raise ReplayRefused(f"dead letter {dlq_id} is {row[0]}, not open")
