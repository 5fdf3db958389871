"""Scheduled reminders, in the same claim-before-send discipline as every notification.

Every period, one transaction (as the notifier's role):
  1. find what is due: an open shortfall at each step after it opened (1 h, 24 h, 72 h),
     a chain deposit still waiting for finality long after it was recorded, a hold close
     to its expiry. A step is due from its moment for `window_s`, which is wider than
     the period, so a scan always lands inside it, across a restart too;
  2. claim each reminder by its key, `<kind>:<subject>:<cycle>` (subject: the user;
     cycle: the shortfall, deposit or hold it is about, so a user's second shortfall is
     reminded again), INSERT ... ON CONFLICT DO NOTHING;
  3. for the keys this transaction claimed, record the reminder's intent and its
     delivery slots (notify/slots.py), then commit.
Claim and intent commit together: a reminder is made once, however often the scan runs
or restarts inside its window; the sender then delivers it like any intent. A step whose
window passed while nothing ran is skipped, never sent late.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from decimal import Decimal

import psycopg2
import structlog

from paystream.notify import slots
from paystream.notify.intents import Intent, IntentType, intent_id, new_intent, now_text
from paystream.notify.settings import ReminderSettings
from paystream.schema.db import Connection, Cursor, connect, database_url

log = structlog.get_logger("notify.reminders")


@dataclass(frozen=True)
class Due:
    key: str
    intent: Intent


def _window(moment_sql: str) -> str:
    """`moment_sql` (a timestamptz expression) fell within the last window."""
    return (f"{moment_sql} <= now() AND {moment_sql} > now() - make_interval(secs =>"
            " %(window_s)s)")


def due(cur: Cursor, settings: ReminderSettings) -> list[Due]:
    """Step 1: every reminder whose window is open now."""
    created_at = now_text()
    found: list[Due] = []
    for after in settings.shortfall_after_s:
        cur.execute(
            "SELECT id, user_id, asset, source_event_id, amount FROM account_shortfalls"
            " WHERE resolved_at IS NULL AND "
            + _window("created_at + make_interval(secs => %(after)s)"),
            {"after": after, "window_s": settings.window_s})
        for shortfall_id, user_id, asset, source, amount in cur.fetchall():
            key = f"shortfall_open_{after:g}s:{user_id}:{shortfall_id}"
            found.append(_due(key, IntentType.REMINDER_SHORTFALL_OPEN, source, user_id,
                              asset, amount, created_at, shortfall_id=shortfall_id,
                              open_for_s=after))
    cur.execute(
        "SELECT event_id, user_id, asset, amount, network FROM chain_deposits"
        " WHERE state IN ('pending', 'suspect') AND "
        + _window("recorded_at + make_interval(secs => %(after)s)"),
        {"after": settings.deposit_after_s, "window_s": settings.window_s})
    for event_id, user_id, asset, amount, network in cur.fetchall():
        found.append(_due(f"deposit_waiting:{user_id}:{event_id}",
                          IntentType.REMINDER_DEPOSIT_WAITING, event_id, user_id, asset,
                          amount, created_at, network=network,
                          waiting_for_s=settings.deposit_after_s))
    cur.execute(
        "SELECT hold_id, user_id, asset, amount, expires_at FROM holds WHERE state = 'held'"
        " AND " + _window("expires_at - make_interval(secs => %(before)s)"),
        {"before": settings.hold_before_s, "window_s": settings.window_s})
    for hold_id, user_id, asset, amount, expires_at in cur.fetchall():
        found.append(_due(f"hold_expiring:{user_id}:{hold_id}",
                          IntentType.REMINDER_HOLD_EXPIRING, hold_id, user_id, asset, amount,
                          created_at, expires_at=expires_at.isoformat()))
    return found


def _due(key: str, kind: IntentType, source: str, user_id: str, asset: str, amount: Decimal,
         created_at: str, **extra: object) -> Due:
    # The intent id derives from the key: one reminder, one id, whoever makes it.
    intent = new_intent(kind, source, user_id, event_type=kind.value, asset=asset,
                        amount=amount, created_at=created_at, reminder_key=key, **extra)
    return Due(key, replace(intent, id=intent_id(key, kind)))


def remind_once(conn: Connection, settings: ReminderSettings) -> int:
    """Steps 1 to 3 in one transaction; returns how many reminders were made."""
    with conn, conn.cursor() as cur:
        candidates = due(cur, settings)
        if not candidates:
            return 0
        # Step 2. The claim: only the keys no earlier scan made.
        cur.execute("SELECT reminder_key FROM notification_reminders"
                    " WHERE reminder_key = ANY(%s)", ([d.key for d in candidates],))
        made = {row[0] for row in cur.fetchall()}
        fresh = [d for d in candidates if d.key not in made]
        if not fresh:
            return 0
        # Step 3. The intents first (the claim's foreign key), then the claims: a key
        # another scan took meanwhile conflicts, and this transaction keeps nothing.
        slots.record(cur, [(d.intent, None) for d in fresh])
        cur.execute("INSERT INTO notification_reminders (reminder_key, intent_id)"
                    " SELECT * FROM unnest(%s::text[], %s::text[])",
                    ([d.key for d in fresh], [d.intent.id for d in fresh]))
    for d in fresh:
        log.info("reminder_made", reminder_key=d.key, intent_id=d.intent.id,
                 type=d.intent.type.value, user_id=d.intent.user_id)
    return len(fresh)


def run(settings: ReminderSettings, stop: threading.Event) -> None:
    """remind_once every period until `stop`; a database error is logged and retried
    at the next period (the window is wider, so nothing is skipped for one failure)."""
    conn: Connection | None = None
    while not stop.is_set():
        try:
            if conn is None or conn.closed:
                conn = connect(database_url("notifier"), application_name="paystream-remind")
            remind_once(conn, settings)
        except psycopg2.Error as exc:
            log.warning("reminders_database_error", error=str(exc).strip()[:300])
            if conn is not None:
                conn.close()
            conn = None
        stop.wait(settings.period_s)
    if conn is not None:
        conn.close()
