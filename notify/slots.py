"""The one writer of notification intents and their delivery slots (migration 0011):
the notifier consumer (intents read from the topic) and the reminder scheduler (intents
it makes) both record through here, in their own transaction, before anything is sent;
housekeeping forgets the ones that are done through here too (migration 0015).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg2.errors

from paystream.notify.intents import Intent, wants
from paystream.schema.db import Cursor


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
    # In key order: two notifier groups recording the same batch (a rebalance's overlap,
    # a second group on the topic) in different orders deadlocked on the intents' key
    # (a second lost each time, the bench's whole p99); in one order the second waits.
    intents = sorted(intents, key=lambda pair: pair[0].id)
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
    cur.execute("SELECT endpoint_id, user_id, event_types, merchant_id"
                " FROM notification_endpoints WHERE disabled_at IS NULL")
    endpoints = cur.fetchall()
    # A merchant's endpoint hears of its own users only; an operator's (no merchant), of
    # every user (migration 0033).
    cur.execute("SELECT user_id, merchant_id FROM users WHERE user_id = ANY(%s)",
                (sorted({i.user_id for i, _ in intents}),))
    merchant_of = dict(cur.fetchall())
    slots = sorted((i.id, endpoint_id) for i, _ in intents
                   for endpoint_id, user_id, patterns, merchant in endpoints
                   if (user_id is None or user_id == i.user_id)
                   and (merchant is None or merchant == merchant_of.get(i.user_id))
                   and wants(patterns, i.type))
    made = 0
    if slots:
        cur.execute(
            "INSERT INTO notification_deliveries (intent_id, endpoint_id)"
            " SELECT * FROM unnest(%s::text[], %s::text[])"
            " ON CONFLICT (intent_id, endpoint_id) DO NOTHING",
            ([s[0] for s in slots], [s[1] for s in slots]))
        made = cur.rowcount
    return Recorded(fresh, made)


# What a purge may delete: an intent recorded before the cutoff whose every slot is
# final (delivered, or failed for good), and which no reminder claim names (a reminder's
# key must outlive its window, or the scheduler would make it again). Its slots and
# attempts go with it, in the same statement.
_PURGEABLE = (
    "SELECT i.intent_id FROM notification_intents i"
    " WHERE i.recorded_at < %(cutoff)s"
    " AND NOT EXISTS (SELECT 1 FROM notification_deliveries d"
    "  WHERE d.intent_id = i.intent_id AND d.state = 'pending')"
    " AND NOT EXISTS (SELECT 1 FROM notification_reminders r"
    "  WHERE r.intent_id = i.intent_id)")
# A batch is chosen again this often when slots go back to pending under it.
_PURGE_TRIES = 3


def purge_final(cur: Cursor, cutoff: datetime, limit: int) -> int:
    """Delete up to `limit` intents that are done (see _PURGEABLE) and recorded before
    `cutoff`, oldest first, with their slots and attempts, in one statement; return how
    many intents. The cursor must be in autocommit mode (a failed statement undoes only
    itself). A slot an operator moves back to pending meanwhile (`notifications
    redeliver`) is not deleted; its intent's delete then fails its foreign key, the
    statement undoes itself, and the batch is chosen again without that intent. The
    cutoff must be older than the notifications topic's retention: an intent read again
    after its purge would be recorded and sent again."""
    for _ in range(_PURGE_TRIES):
        try:
            cur.execute(
                f"WITH batch AS ({_PURGEABLE} ORDER BY i.recorded_at LIMIT %(limit)s),"
                " attempts AS (DELETE FROM notification_attempts a USING batch"
                "  WHERE a.intent_id = batch.intent_id),"
                " slots AS (DELETE FROM notification_deliveries d USING batch"
                "  WHERE d.intent_id = batch.intent_id AND d.state <> 'pending')"
                " DELETE FROM notification_intents i USING batch"
                " WHERE i.intent_id = batch.intent_id",
                {"cutoff": cutoff, "limit": limit})
        except psycopg2.errors.ForeignKeyViolation:
            continue
        return max(int(cur.rowcount), 0)
    return 0  # slots kept going back to pending: the next run takes the rest


def count_final(cur: Cursor, cutoff: datetime) -> int:
    """How many intents purge_final would delete with this cutoff (no limit)."""
    cur.execute(f"SELECT count(*) FROM ({_PURGEABLE}) AS purgeable", {"cutoff": cutoff})
    row = cur.fetchone()
    return 0 if row is None else int(row[0])
