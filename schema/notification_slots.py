"""The one writer of notification intents and their delivery slots (migration 0011):
the notifier consumer (intents read from the topic) and the reminder scheduler (intents
it makes) both record through here, in their own transaction, before anything is sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from paystream.schema.db import Cursor
from paystream.schema.notifications import Intent, wants


@dataclass(frozen=True)
class Recorded:
    fresh: int  # intents not recorded before
    slots: int  # delivery slots made


def record(cur: Cursor, intents: Sequence[tuple[Intent, str | None]]) -> Recorded:
    """Each (intent, trace id) once (ON CONFLICT (intent_id) DO NOTHING), and one slot per
    intent and enabled endpoint that wants it (ON CONFLICT on (intent_id, endpoint_id)
    DO NOTHING: an intent seen again gets the slots it may have missed, no second one)."""
    if not intents:
        return Recorded(0, 0)
    cur.execute(
        "INSERT INTO notification_intents (intent_id, type, user_id, created_at, data,"
        " trace_id) SELECT intent_id, type, user_id, created_at, data, trace_id"
        " FROM jsonb_to_recordset(%s::jsonb) AS r(intent_id text, type text,"
        " user_id text, created_at timestamptz, data jsonb, trace_id text)"
        " ON CONFLICT (intent_id) DO NOTHING RETURNING intent_id",
        (json.dumps([{"intent_id": i.id, "type": i.type.value, "user_id": i.user_id,
                      "created_at": i.created_at, "data": i.data, "trace_id": t}
                     for i, t in intents]),))
    fresh = len(cur.fetchall())
    cur.execute("SELECT endpoint_id, user_id, event_types FROM notification_endpoints"
                " WHERE disabled_at IS NULL")
    endpoints = cur.fetchall()
    slots = [(i.id, endpoint_id) for i, _ in intents
             for endpoint_id, user_id, patterns in endpoints
             if (user_id is None or user_id == i.user_id) and wants(patterns, i.type)]
    made = 0
    if slots:
        cur.execute(
            "INSERT INTO notification_deliveries (intent_id, endpoint_id)"
            " SELECT * FROM unnest(%s::text[], %s::text[])"
            " ON CONFLICT (intent_id, endpoint_id) DO NOTHING",
            ([s[0] for s in slots], [s[1] for s in slots]))
        made = cur.rowcount
    return Recorded(fresh, made)
