"""Balances: a balance row's key (one balance per (user, asset), never one number for two
assets), and the one reader of a user's balances, now or at a point in time (but for
the merchant API's GET balances, which reads the rows with its key check in one call:
migration 0012's api_balances)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TypeAlias

from paystream.schema import transfers
from paystream.schema.accounts import USER_KINDS
from paystream.schema.db import Cursor

# (user_id, asset): the primary key of balances, and of the journals' per-balance sums.
# A plain tuple (not a NamedTuple): the ledger builds one per event on its hot path.
BalanceKey: TypeAlias = tuple[str, str]


@dataclass(frozen=True)
class BalanceRow:
    user_id: str
    asset: str
    balance: Decimal  # available
    pending: Decimal
    held: Decimal


def read(cur: Cursor, user_id: str | None = None, at: str | None = None) -> list[BalanceRow]:
    """Balances now (the balances rows), or of one user at `at` (a timestamp Postgres
    reads) from the postings of their accounts (schema/transfers.py): what the books
    said at that moment. Read in `cur`'s transaction. `paystream balances` and the
    merchant API both answer with this."""
    if at is not None:
        assert user_id is not None, "a balance at a point in time is one user's"
        books = transfers.user_books(cur, [user_id], at)
        assets = sorted({asset for _u, asset, _k in books})
        return [BalanceRow(user_id, asset,
                           *(books.get((user_id, asset, kind), Decimal(0))
                             for kind in USER_KINDS)) for asset in assets]
    sql = "SELECT user_id, asset, balance, pending, held FROM balances"
    params: tuple[str, ...] = ()
    if user_id is not None:
        sql += " WHERE user_id = %s"
        params = (user_id,)
    cur.execute(sql + " ORDER BY user_id, asset", params)
    return [BalanceRow(*row) for row in cur.fetchall()]
