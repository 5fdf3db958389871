"""Shortfalls, the ledger's in one place: what a reversed credit or a debit could not take
(account_shortfalls rows), and the flag they put on an account (see
schema/migrations/0005_credit_reversal.sql).

The ledger writes a shortfall, in the batch transaction that planned it (record,
open_for_debits); only a person resolves one (`paystream shortfalls resolve`, the
console's ledger page), after the money was recovered or written off outside paystream.
Resolving moves no money (the journal already holds exactly what moved): it records who
decided what, and lifts the flag once the user has no open shortfall left, so their
withdrawals are accepted again. The user is told in the resolution's transaction by the
`tell` the door hands resolve() (notify/ledger_consequence.py shortfall_resolved): the
ledger imports no feature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import structlog

from paystream.consumers.ledger.plan import Candidate, Plan
from paystream.operator_cli import format_table
from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor

log = structlog.get_logger("consumers.ledger")

COLUMNS = ("id", "user_id", "asset", "amount", "deposit_event_id", "source_event_id",
           "created_at", "resolved_at", "resolution")

# (user, asset, the event that could not take it all, the deposit or original it
# reverses, the amount owed)
Shortfall = tuple[str, str, str, str, Decimal]


def record(cur: Cursor, shortfalls: Sequence[Shortfall]) -> None:
    """One row per source event; a replay of the same event adds nothing."""
    if not shortfalls:
        return
    cur.executemany(
        "INSERT INTO account_shortfalls (user_id, asset, source_event_id,"
        " deposit_event_id, amount) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (source_event_id) DO NOTHING",
        [(user, asset, source, reverses, format_amount(amount))
         for user, asset, source, reverses, amount in shortfalls])


def open_for_debits(cur: Cursor, short: Sequence[Candidate], plan: Plan) -> None:
    """What a refund, chargeback, revert or debit adjustment could not take from
    available: a row each (the user is flagged), the platform's receivable already
    posted, and a critical line each (the notifications tell the user). A chain
    reversal's is chain_consequence.py's."""
    owed = {id(c): amount for c, amount in plan.shortfalls}
    record(cur, [(c.event.user_id, c.event.asset, c.event.event_id,
                  c.event.reference or c.event.event_id, owed[id(c)]) for c in short])
    for c in short:
        event = c.event
        log.critical("shortfall_opened", trace_id=c.trace_id or event.event_id,
                     event_id=event.event_id, event_type=event.event_type.value,
                     reverses=event.reference, user_id=event.user_id, asset=event.asset,
                     amount=format_amount(event.amount),
                     shortfall=format_amount(owed[id(c)]), account_flagged=True)


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


# How a resolution reaches its user, in its transaction: (cursor, the resolved row,
# whether the user is still flagged).
TellResolved = Callable[[Cursor, ShortfallRow, bool], None]


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


def resolve(cur: Any, shortfall_id: int, resolution: str, tell: TellResolved
            ) -> tuple[ShortfallRow, bool]:
    """Mark one open shortfall resolved in the caller's transaction, and `tell` its user
    in it. Returns the row and whether its user is still flagged (another open
    shortfall)."""
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
    tell(cur, resolved, still_flagged)
    return resolved, still_flagged


def render_table(rows: list[ShortfallRow]) -> str:
    return format_table(
        ("id", "user", "asset", "owed", "deposit", "since", "resolved"),
        [(str(r.id), r.user_id, r.asset, format_amount(r.amount), r.deposit_event_id,
          r.created_at.strftime("%Y-%m-%d %H:%M:%S"),
          f"{r.resolved_at:%Y-%m-%d %H:%M} {r.resolution}" if r.resolved_at else "OPEN")
         for r in rows])
