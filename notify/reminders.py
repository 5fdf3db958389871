"""Scheduled reminders, in the same claim-before-send discipline as every notification.

Every period, one transaction (as the notifier's role):
  1. find what is due: an open shortfall at each step after it opened (1 h, 24 h, 72 h),
     a chain deposit still waiting for finality long after it was recorded, a hold close
     to its expiry, an unpaid invoice (state `new`) at each step before its deadline
     (6 h, 3 h, 1 h). A step is due from its moment for `window_s`, which is wider than
     the period, so a scan always lands inside it, across a restart too;
  2. claim each reminder by its key, `<kind>:<subject>:<cycle>` (subject: the user;
     cycle: the shortfall, deposit or hold it is about, so a user's second shortfall is
     reminded again; an invoice's is `invoice_unpaid:<invoice>:<deadline epoch s>:
     <offset s>`, so a moved deadline is a new cycle); a key another scan claimed is
     left alone;
  3. for the keys this transaction claimed, record the reminder's intent and its
     delivery slots (notify/slots.py), then commit.
Claim and intent commit together: a reminder is made once, however often the scan runs
or restarts inside its window; the sender then delivers it like any intent. A step whose
window passed while nothing ran is skipped, never sent late; an invoice's is claimed as
skipped (no intent, `skipped`), counted (paystream_reminders_skipped_total) and logged.
Only an invoice's steps after its deadline was set count (created, or extended: the
history says when): one created 2 h before its deadline has no 6 h or 3 h reminder,
and an extension's steps already past when it was made are none either, skipped or
not. Looking past the window (a sweep) is only
needed when a step may have been missed: a process's first scan, or the first after a
gap (must_sweep); otherwise a scan reads the window's narrow range of deadlines only.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

import psycopg2
import structlog

from paystream.notify import slots
from paystream.notify.intents import Intent, IntentType, intent_id, new_intent, now_text
from paystream.notify.metrics import REMINDERS_SKIPPED
from paystream.notify.settings import ReminderSettings
from paystream.schema.amounts import format_amount
from paystream.schema.db import Connection, Cursor, connect, database_url

log = structlog.get_logger("notify.reminders")


@dataclass(frozen=True)
class Due:
    key: str
    intent: Intent


@dataclass(frozen=True)
class Skipped:
    """A step whose window passed while no scan ran: claimed so, never sent."""

    key: str
    kind: str
    user_id: str
    moment: datetime


INVOICE_UNPAID = "invoice_unpaid"


def invoice_key(invoice_id: str, deadline: datetime, offset_s: float) -> str:
    """`invoice_unpaid:<invoice>:<deadline epoch s>:<offset s>`: the cycle is the
    deadline, so an extended invoice is reminded again, step by step."""
    return f"{INVOICE_UNPAID}:{invoice_id}:{math.floor(deadline.timestamp())}:{int(offset_s)}"


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


# An unpaid invoice's steps whose moment (expires_at - offset) has come, after the
# invoice was created, and whose key no scan claimed yet: in its window (due), or past
# it (to claim as skipped). Only a sweep looks past the window: the open-invoice index
# by deadline serves the window's narrow range; a sweep reads every open invoice within
# its longest step of the deadline. Each candidate's claim is looked up by its key (a
# subquery per row, not an anti join: a hash of every claim ever made costs more than
# the window's few lookups, and the claims are kept for good).
_INVOICE_STEPS = (
    "SELECT * FROM (SELECT i.invoice_id, i.user_id, i.asset, i.amount,"
    "  greatest(i.amount - i.amount_paid, 0) AS amount_due, i.expires_at, i.order_id,"
    "  o.offset_s, i.expires_at - make_interval(secs => o.offset_s) AS moment,"
    "  i.expires_at - make_interval(secs => o.offset_s)"
    "   > now() - make_interval(secs => %(window_s)s) AS in_window,"
    "  concat_ws(':', %(kind)s::text, i.invoice_id,"
    "            floor(extract(epoch FROM i.expires_at))::bigint, o.offset_s) AS key"
    "  FROM unnest(%(offsets)s::bigint[]) AS o(offset_s)"
    "  JOIN invoices i ON i.state = 'new'"
    "   AND i.expires_at <= now() + make_interval(secs => o.offset_s)"
    "   AND (%(sweep)s OR i.expires_at > now() + make_interval(secs => o.offset_s)"
    "                                   - make_interval(secs => %(window_s)s))"
    "   AND i.expires_at - make_interval(secs => o.offset_s)"
    "       > (SELECT max(h.at) FROM invoice_history h WHERE h.invoice_id = i.invoice_id"
    "          AND h.cause IN ('created', 'extended'))) AS step"
    " WHERE (SELECT true FROM notification_reminders r"
    "        WHERE r.reminder_key = step.key) IS NULL")


def invoice_steps(cur: Cursor, settings: ReminderSettings, *, sweep: bool
                  ) -> tuple[list[Due], list[Skipped]]:
    """Step 1 for unpaid invoices: the reminders due now and, with `sweep`, the steps
    whose window passed unclaimed, to claim as skipped."""
    created_at = now_text()
    cur.execute(_INVOICE_STEPS, {"offsets": [int(s) for s in settings.invoice_reminders_s],
                                 "window_s": settings.window_s, "kind": INVOICE_UNPAID,
                                 "sweep": sweep})
    due_now: list[Due] = []
    skipped: list[Skipped] = []
    for (invoice_id, user_id, asset, amount, amount_due, expires_at, order_id, offset_s,
         moment, in_window, key) in cur.fetchall():
        # The key as the claim query spells it (invoice_key spells it the same).
        if not in_window:
            skipped.append(Skipped(key, INVOICE_UNPAID, user_id, moment))
            continue
        due_now.append(_due(key, IntentType.REMINDER_INVOICE_UNPAID, invoice_id, user_id,
                            asset, amount, created_at, invoice_id=invoice_id,
                            amount_due=format_amount(amount_due) if amount_due > 0 else "0",
                            expires_at=expires_at.isoformat(), offset_s=int(offset_s),
                            order_id=order_id))
    return due_now, skipped


def _due(key: str, kind: IntentType, source: str, user_id: str, asset: str, amount: Decimal,
         created_at: str, **extra: object) -> Due:
    # The intent id derives from the key: one reminder, one id, whoever makes it.
    intent = new_intent(kind, source, user_id, event_type=kind.value, asset=asset,
                        amount=amount, created_at=created_at, reminder_key=key, **extra)
    return Due(key, replace(intent, id=intent_id(key, kind)))


def remind_once(conn: Connection, settings: ReminderSettings, *, sweep: bool = True) -> int:
    """Steps 1 to 3 in one transaction; returns how many reminders were made. `sweep`:
    also claim as skipped the invoice steps whose window passed unclaimed (run() sweeps
    only when it may have missed one)."""
    with conn, conn.cursor() as cur:
        # Short queries whose row estimates (deadlines against now()) are guesses: with
        # 50,000 open invoices the planner's cost passed jit_above_cost and compiling
        # took 14 ms of an 18 ms scan (4 ms without).
        cur.execute("SET LOCAL jit = off")
        candidates = due(cur, settings)
        invoices_due, skipped = invoice_steps(cur, settings, sweep=sweep)
        candidates += invoices_due
        if not candidates and not skipped:
            return 0
        # Step 2. The claim: only the keys no earlier scan made.
        cur.execute("SELECT reminder_key FROM notification_reminders"
                    " WHERE reminder_key = ANY(%s)", ([d.key for d in candidates],))
        made = {row[0] for row in cur.fetchall()}
        fresh = [d for d in candidates if d.key not in made]
        if not fresh and not skipped:
            return 0
        # Step 3. The intents first (the claim's foreign key), then the claims, the
        # skipped ones without an intent: a key another scan took meanwhile conflicts,
        # and this transaction keeps nothing.
        slots.record(cur, [(d.intent, None) for d in fresh])
        cur.execute("INSERT INTO notification_reminders (reminder_key, intent_id, skipped)"
                    " SELECT * FROM unnest(%s::text[], %s::text[], %s::boolean[])",
                    ([d.key for d in fresh] + [k.key for k in skipped],
                     [d.intent.id for d in fresh] + [None] * len(skipped),
                     [False] * len(fresh) + [True] * len(skipped)))
    for d in fresh:
        log.info("reminder_made", reminder_key=d.key, intent_id=d.intent.id,
                 type=d.intent.type.value, user_id=d.intent.user_id)
    for k in skipped:
        REMINDERS_SKIPPED.labels(kind=k.kind).inc()
        log.warning("reminder_skipped", reminder_key=k.key, kind=k.kind, user_id=k.user_id,
                    moment=k.moment.isoformat(),
                    why="its moment passed more than the window ago while no scan ran")
    return len(fresh)


def must_sweep(last_ok: float | None, now: float, settings: ReminderSettings) -> bool:
    """Whether a scan starting at `now` (monotonic) may find a step whose window passed
    unclaimed. Every scan claims each step in its window; so after one that succeeded
    less than a window ago, by a period's margin (a scan's own time), every step since
    it is still in the window: nothing can have been missed. The first scan of a process,
    or the first after a gap (the database down), sweeps."""
    return last_ok is None or now - last_ok >= settings.window_s - settings.period_s


def run(settings: ReminderSettings, stop: threading.Event) -> None:
    """remind_once every period until `stop`; a database error is logged and retried
    at the next period (the window is wider, so nothing is skipped for one failure)."""
    conn: Connection | None = None
    last_ok: float | None = None  # when the last scan that committed started
    while not stop.is_set():
        try:
            if conn is None or conn.closed:
                conn = connect(database_url("notifier"), application_name="paystream-remind")
            started = time.monotonic()
            remind_once(conn, settings, sweep=must_sweep(last_ok, started, settings))
            last_ok = started
        except psycopg2.Error as exc:
            log.warning("reminders_database_error", error=str(exc).strip()[:300])
            if conn is not None:
                conn.close()
            conn = None
        stop.wait(settings.period_s)
    if conn is not None:
        conn.close()
