"""holds: withdrawals in flight (migration 0009). The ledger places and closes them in its
batch transaction; the expiry scheduler (consumers/ledger/operator_events.py) claims the
expired ones. The table's trigger refuses any other transition, whoever writes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor


class HoldState(StrEnum):
    HELD = "held"
    EXPIRING = "expiring"  # the scheduler wrote its hold_expired event; still open
    SETTLED = "settled"
    FAILED = "failed"
    EXPIRED = "expired"

    @property
    def is_open(self) -> bool:
        return self in (HoldState.HELD, HoldState.EXPIRING)


@dataclass(frozen=True, slots=True)
class Hold:
    hold_id: str
    user_id: str
    asset: str
    provider: str
    amount: Decimal
    fee: Decimal
    state: HoldState

    @property
    def total(self) -> Decimal:
        """What it took from available: amount + fee."""
        return self.amount + self.fee


_COLUMNS = "hold_id, user_id, asset, provider, amount, fee, state"


def _hold(row: tuple[Any, ...]) -> Hold:
    return Hold(row[0], row[1], row[2], row[3], row[4], row[5], HoldState(row[6]))


def lock(cur: Cursor, hold_ids: Iterable[str]) -> dict[str, Hold]:
    """The holds named, locked (FOR UPDATE, in id order) until the caller's commit."""
    wanted = sorted(set(hold_ids))
    if not wanted:
        return {}
    cur.execute(f"SELECT {_COLUMNS} FROM holds WHERE hold_id = ANY(%s) ORDER BY hold_id"
                " FOR UPDATE", (wanted,))
    return {row[0]: _hold(row) for row in cur.fetchall()}


def place(cur: Cursor, placed: Sequence[Hold], ttl_s: float) -> None:
    """New holds, expiring `ttl_s` from now; an id already placed is left as it is."""
    if not placed:
        return
    cur.executemany(
        "INSERT INTO holds (hold_id, user_id, asset, provider, amount, fee, expires_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, now() + %s * interval '1 second')"
        " ON CONFLICT (hold_id) DO NOTHING",
        [(h.hold_id, h.user_id, h.asset, h.provider, format_amount(h.amount),
          format_amount(h.fee) if h.fee > 0 else "0", ttl_s) for h in placed])


def close(cur: Cursor, closed: Sequence[tuple[str, HoldState, str, Decimal | None,
                                              Decimal | None]]) -> None:
    """(hold id, final state, closing event id, settled amount, settled fee) each."""
    if not closed:
        return
    cur.executemany(
        "UPDATE holds SET state = %s, closed_by = %s, settled_amount = %s, settled_fee = %s,"
        " closed_at = now() WHERE hold_id = %s",
        [(state.value, by, amount, fee, hold_id) for hold_id, state, by, amount, fee in closed])


def open_holds(cur: Cursor, user_id: str | None = None, limit: int = 500
               ) -> list[tuple[Hold, datetime]]:
    """Open holds (held or expiring), oldest first, with their expiry: all users' or one's."""
    # One statement per case: `(%s IS NULL OR user_id = %s)` would read every user's.
    mine = "" if user_id is None else " AND user_id = %(user)s"
    cur.execute(f"SELECT {_COLUMNS}, expires_at FROM holds WHERE state IN ('held', 'expiring')"
                f"{mine} ORDER BY created_at LIMIT %(limit)s", {"user": user_id, "limit": limit})
    return [(_hold(row), row[7]) for row in cur.fetchall()]


def claim_expired(cur: Cursor, limit: int) -> list[Hold]:
    """Up to `limit` open holds past their expiry, moved to `expiring` (the claim: a
    second scheduler, or this one after a restart, skips them). SKIP LOCKED: a hold the
    ledger is closing right now is left for the next round."""
    cur.execute(
        f"UPDATE holds SET state = 'expiring' WHERE hold_id IN (SELECT hold_id FROM holds"
        f" WHERE state = 'held' AND expires_at <= now() ORDER BY expires_at LIMIT %s"
        f" FOR UPDATE SKIP LOCKED) RETURNING {_COLUMNS}", (limit,))
    return [_hold(row) for row in cur.fetchall()]
