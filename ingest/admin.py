"""Operator actions on the tables the ingest reads: users, deposit addresses, balances."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from paystream.ingest.alchemy import ADDRESS_PATTERN, NETWORK_PATTERN
from paystream.operator_cli import format_table
from paystream.schema import transfers
from paystream.schema.accounts import USER_KINDS
from paystream.schema.amounts import format_amount
from paystream.schema.db import Connection
from paystream.schema.events import USER_ID_PATTERN


class AdminError(ValueError):
    """An operator request that cannot be carried out; the message says why."""


def add_user(conn: Connection, user_id: str) -> bool:
    """Create a user; return False if it already existed."""
    if USER_ID_PATTERN.fullmatch(user_id) is None:
        raise AdminError(f"user id must match {USER_ID_PATTERN.pattern}: {user_id!r}")
    with conn, conn.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s) ON CONFLICT DO NOTHING"
                    " RETURNING user_id", (user_id,))
        return cur.fetchone() is not None


def add_address(conn: Connection, network: str, address: str, user_id: str) -> bool:
    """Assign a deposit address to a user; return False if it already was theirs."""
    network = network.upper()
    if NETWORK_PATTERN.fullmatch(network) is None:
        raise AdminError(f"network must match {NETWORK_PATTERN.pattern}: {network!r}")
    if ADDRESS_PATTERN.fullmatch(address.removeprefix("0x")) is None:
        raise AdminError(f"not an address: {address!r}")
    address = address.lower()
    with conn, conn.cursor() as cur:
        cur.execute("SELECT 1 FROM users WHERE user_id = %s", (user_id,))
        if cur.fetchone() is None:
            raise AdminError(f"unknown user {user_id!r}; add it first (paystream users add)")
        cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                    " VALUES (%s, %s, %s) ON CONFLICT (network, address) DO NOTHING"
                    " RETURNING user_id", (network, address, user_id))
        if cur.fetchone() is not None:
            return True
        cur.execute("SELECT user_id FROM deposit_addresses WHERE network = %s"
                    " AND address = %s", (network, address))
        found = cur.fetchone()
        assert found is not None, "the insert conflicted, so the address is assigned"
        owner = found[0]
    if owner != user_id:
        # An address credits exactly one user: reassigning it would redirect deposits.
        raise AdminError(f"{network} {address} already belongs to {owner!r}")
    return False


@dataclass(frozen=True)
class BalanceRow:
    user_id: str
    asset: str
    balance: Decimal  # available
    pending: Decimal
    held: Decimal


def balances(conn: Connection, user_id: str | None = None,
             at: datetime | None = None) -> list[BalanceRow]:
    """Balances now (the balances rows), or of one user at `at` from the postings of
    their accounts (schema/transfers.py): what the books said at that moment."""
    if at is not None:
        if user_id is None:
            raise AdminError("a balance at a point in time needs --user")
        with conn, conn.cursor() as cur:
            books = transfers.user_books(cur, [user_id], at.isoformat())
        assets = sorted({asset for _u, asset, _k in books})
        return [BalanceRow(user_id, asset,
                           *(books.get((user_id, asset, kind), Decimal(0))
                             for kind in USER_KINDS)) for asset in assets]
    sql = "SELECT user_id, asset, balance, pending, held FROM balances"
    params: tuple[str, ...] = ()
    if user_id is not None:
        sql += " WHERE user_id = %s"
        params = (user_id,)
    with conn, conn.cursor() as cur:
        cur.execute(sql + " ORDER BY user_id, asset", params)
        return [BalanceRow(*row) for row in cur.fetchall()]


def render_table(rows: list[BalanceRow]) -> str:
    """A plain text table; amounts in canonical form (no float, no trailing zeros)."""
    return format_table(("user", "asset", "available", "pending", "held"),
                        [(r.user_id, r.asset, format_amount(r.balance),
                          format_amount(r.pending), format_amount(r.held)) for r in rows],
                        right_aligned={2, 3, 4}, rule=True)
