"""Shortfalls: what a reversed credit could not take back, and the flag they put on an
account (see schema/migrations/0005_credit_reversal.sql and ledger.py).

The ledger writes a shortfall; only a person resolves one, after the money was recovered
or written off outside paystream. Resolving moves no money (the journal already holds
exactly what moved): it records who decided what, and lifts the flag once the user has
no open shortfall left, so their withdrawals are accepted again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from paystream.notify import intents
from paystream.operator_cli import format_table
from paystream.schema.amounts import format_amount
from paystream.schema.events import NOTIFICATIONS_AGGREGATE
from paystream.schema.outbox import publish

COLUMNS = ("id", "user_id", "asset", "amount", "deposit_event_id", "source_event_id",
           "created_at", "resolved_at", "resolution")


class ResolveRefused(Exception):  # noqa: N818 - a refusal, not an error of the program
    """The shortfall cannot be resolved; the message says why."""


@dataclass(frozen=True)
class ShortfallRow:
    id: int
    user_id: str
    asset: str
    amount: Decimal
    deposit_event_id: str
    source_event_id: str
    created_at: datetime
    resolved_at: datetime | None
    resolution: str | None


def list_shortfalls(cur: Any, *, include_resolved: bool = False,
                    user_id: str | None = None) -> list[ShortfallRow]:
    where, params = [], []
    if not include_resolved:
        where.append("resolved_at IS NULL")
    if user_id is not None:
        where.append("user_id = %s")
        params.append(user_id)
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    cur.execute(f"SELECT {', '.join(COLUMNS)} FROM account_shortfalls {clause}"
                " ORDER BY id", params)
    return [ShortfallRow(*row) for row in cur.fetchall()]


def resolve(cur: Any, shortfall_id: int, resolution: str) -> tuple[ShortfallRow, bool]:
    """Mark one open shortfall resolved in the caller's transaction. Returns the row and
    whether its user is still flagged (another open shortfall)."""
    if not resolution.strip():
        raise ResolveRefused("say how it was resolved (--resolution): it is the record")
    cur.execute(f"UPDATE account_shortfalls SET resolved_at = now(), resolution = %s"
                f" WHERE id = %s AND resolved_at IS NULL RETURNING {', '.join(COLUMNS)}",
                (resolution.strip(), shortfall_id))
    row = cur.fetchone()
    if row is None:
        cur.execute("SELECT resolved_at FROM account_shortfalls WHERE id = %s",
                    (shortfall_id,))
        found = cur.fetchone()
        if found is None:
            raise ResolveRefused(f"no shortfall with id {shortfall_id}")
        raise ResolveRefused(f"shortfall {shortfall_id} was already resolved at {found[0]}")
    resolved = ShortfallRow(*row)
    cur.execute("SELECT EXISTS (SELECT 1 FROM account_shortfalls WHERE user_id = %s"
                " AND resolved_at IS NULL)", (resolved.user_id,))
    still_flagged = bool(cur.fetchone()[0])
    # The user is told, in the resolution's transaction (notify/intents.py).
    intent = intents.new_intent(
        intents.IntentType.SHORTFALL_RESOLVED, resolved.source_event_id,
        resolved.user_id, event_type="shortfall_resolved", asset=resolved.asset,
        amount=resolved.amount, created_at=intents.now_text(),
        shortfall_id=resolved.id, resolution=resolved.resolution,
        account_flagged=still_flagged)
    publish(cur, NOTIFICATIONS_AGGREGATE,
            intents.outbox_batches([(intent, resolved.source_event_id)],
                                         intent.user_id))
    return resolved, still_flagged


def render_table(rows: list[ShortfallRow]) -> str:
    return format_table(
        ("id", "user", "asset", "owed", "deposit", "since", "resolved"),
        [(str(r.id), r.user_id, r.asset, format_amount(r.amount), r.deposit_event_id,
          r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
          f"{r.resolved_at:%Y-%m-%d %H:%M} {r.resolution}" if r.resolved_at else "OPEN")
         for r in rows])
