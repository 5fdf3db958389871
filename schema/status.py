"""Event status: the one transition function every status change goes through.

The status lives in `event_status` (migration 0030), one narrow row per payment event,
inserted `received` with the event (schema/outbox.py); payment_events itself is only
inserted. Readers join the two on event_id.
"""

from __future__ import annotations

from enum import StrEnum

from paystream.schema.db import Cursor
from paystream.schema.pgarray import text_array


class EventStatus(StrEnum):
    RECEIVED = "received"
    # A chain deposit the ledger holds in balances.pending until its block is final.
    PENDING_FINALITY = "pending_finality"
    APPLIED = "applied"
    REJECTED = "rejected"
    DEAD_LETTERED = "dead_lettered"
    # A chain deposit a reorg removed (or that did not match the chain): never credited.
    REORGED = "reorged"
    # A chain deposit credited before finality (a network with a credit depth):
    # spendable, still re-checked against the chain until its block is final.
    CREDITED = "credited"
    # A credited chain deposit a reorg removed: its compensating debit was applied.
    REVERSED = "reversed"


# A DLQ replay sends a dead-lettered event back through the outbox, so it becomes
# `received` again; applied, rejected, reorged and reversed are final (a retry cannot
# change an outcome). A chain deposit goes received -> pending_finality -> applied |
# reorged, or, credited before finality, pending_finality -> credited -> applied |
# reversed. Never credited -> reorged: once money was credited, only a reversal undoes it.
ALLOWED_TRANSITIONS: dict[EventStatus, frozenset[EventStatus]] = {
    EventStatus.RECEIVED: frozenset(
        {EventStatus.APPLIED, EventStatus.REJECTED, EventStatus.DEAD_LETTERED,
         EventStatus.PENDING_FINALITY}
    ),
    EventStatus.PENDING_FINALITY: frozenset(
        {EventStatus.APPLIED, EventStatus.REORGED, EventStatus.CREDITED}),
    EventStatus.CREDITED: frozenset({EventStatus.APPLIED, EventStatus.REVERSED}),
    EventStatus.DEAD_LETTERED: frozenset({EventStatus.RECEIVED}),
    EventStatus.APPLIED: frozenset(),
    EventStatus.REJECTED: frozenset(),
    EventStatus.REORGED: frozenset(),
    EventStatus.REVERSED: frozenset(),
}


class IllegalTransitionError(ValueError):
    """A status change the lifecycle does not allow."""


def check_transition(current: EventStatus | str, target: EventStatus | str) -> None:
    """Raise IllegalTransitionError unless current -> target is allowed."""
    cur, tgt = EventStatus(current), EventStatus(target)
    if tgt not in ALLOWED_TRANSITIONS[cur]:
        raise IllegalTransitionError(f"event status cannot move from {cur} to {tgt}")


def transition(cur: Cursor, event_ids: list[str], target: EventStatus | str) -> int:
    """Move events to `target` in the caller's transaction; return how many moved.

    Only rows whose current status may legally move to `target` change: the allowed
    sources are derived from ALLOWED_TRANSITIONS, so a replayed batch cannot move an
    applied event back, and a row already at `target` is left alone.
    """
    tgt = EventStatus(target)
    sources = [s.value for s, targets in ALLOWED_TRANSITIONS.items() if tgt in targets]
    if not event_ids or not sources:
        return 0
    cur.execute(
        "UPDATE event_status SET status = %s, status_changed_at = now()"
        " WHERE event_id = ANY(%s::text[]) AND status = ANY(%s::text[])",
        (tgt.value, text_array(event_ids), text_array(sources)),
    )
    return cur.rowcount
