"""The operator's view of deliveries: list, show, redeliver, recover (as the ops role).

A redelivery or a recovery puts slots back to `pending`, due now, with the schedule
started again; the sender then sends them under the same webhook-id (the intent id), so
a receiver that already has one drops it. A slot a live sender holds (its lease not
lapsed) is left alone: its answer is about to be recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from paystream.schema.db import Cursor


class NotFound(ValueError):  # noqa: N818 - a refusal, the message says why
    """No such intent or endpoint."""


@dataclass(frozen=True)
class Slot:
    intent_id: str
    endpoint_id: str
    type: str
    user_id: str
    state: str
    attempts: int
    last_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


_SLOT = ("d.intent_id, d.endpoint_id, i.type, i.user_id, d.state, d.attempts, d.last_status,"
         " d.last_error, d.created_at, d.delivered_at FROM notification_deliveries d"
         " JOIN notification_intents i USING (intent_id)")
# Only slots no live sender holds.
_FREE = "(d.claimed_until IS NULL OR d.claimed_until < now())"


def list_slots(cur: Cursor, *, user_id: str | None, state: str | None, limit: int
               ) -> list[Slot]:
    where, params = [], []
    if user_id is not None:
        where.append("i.user_id = %s")
        params.append(user_id)
    if state is not None:
        where.append("d.state = %s")
        params.append(state)
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    # Newest intents first, by their recorded_at index (migration 0015): ordering by the
    # slots' created_at, which has no index, sorted every delivery ever made (4.2 s at
    # 2 M). A slot is created after its intent is recorded, so the order is nearly one.
    cur.execute(f"SELECT {_SLOT} {clause}"
                " ORDER BY i.recorded_at DESC, d.created_at DESC LIMIT %s", (*params, limit))
    return [Slot(*row) for row in cur.fetchall()]


def show(cur: Cursor, intent_id: str) -> tuple[dict[str, Any], list[Slot],
                                               list[tuple[Any, ...]]]:
    """The intent, its slots and every attempt (endpoint, attempt, started, latency,
    status, error)."""
    cur.execute("SELECT intent_id, type, user_id, created_at, data, trace_id"
                " FROM notification_intents WHERE intent_id = %s", (intent_id,))
    row = cur.fetchone()
    if row is None:
        raise NotFound(f"no intent {intent_id}")
    intent = dict(zip(("id", "type", "user_id", "created_at", "data", "trace_id"), row,
                      strict=True))
    cur.execute(f"SELECT {_SLOT} WHERE d.intent_id = %s ORDER BY d.endpoint_id", (intent_id,))
    slots = [Slot(*r) for r in cur.fetchall()]
    cur.execute("SELECT endpoint_id, attempt, started_at, latency_s, status_code, error"
                " FROM notification_attempts WHERE intent_id = %s ORDER BY id", (intent_id,))
    return intent, slots, cur.fetchall()


def redeliver(cur: Cursor, intent_id: str, endpoint_id: str | None) -> int:
    """The intent's slots (or its slot of `endpoint_id`, made if it has none) due again
    now; returns how many."""
    cur.execute("SELECT 1 FROM notification_intents WHERE intent_id = %s", (intent_id,))
    if cur.fetchone() is None:
        raise NotFound(f"no intent {intent_id}")
    if endpoint_id is not None:
        cur.execute("SELECT 1 FROM notification_endpoints WHERE endpoint_id = %s",
                    (endpoint_id,))
        if cur.fetchone() is None:
            raise NotFound(f"no endpoint {endpoint_id}")
        cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id)"
                    " VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING intent_id",
                    (intent_id, endpoint_id))
        if cur.fetchone() is not None:
            return 1
    cur.execute("UPDATE notification_deliveries d SET state = 'pending', attempts = 0,"
                f" next_attempt_at = now() WHERE d.intent_id = %s AND {_FREE}"
                " AND (%s::text IS NULL OR d.endpoint_id = %s)",
                (intent_id, endpoint_id, endpoint_id))
    return int(cur.rowcount)


def recover(cur: Cursor, since: datetime, endpoint_id: str | None) -> int:
    """Every slot that failed for good among those made since `since` (of one endpoint,
    if given) due again now; returns how many."""
    cur.execute("UPDATE notification_deliveries d SET state = 'pending', attempts = 0,"
                f" next_attempt_at = now() WHERE d.state = 'failed' AND d.created_at >= %s"
                f" AND {_FREE} AND (%s::text IS NULL OR d.endpoint_id = %s)",
                (since, endpoint_id, endpoint_id))
    return int(cur.rowcount)
