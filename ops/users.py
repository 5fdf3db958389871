"""Operator actions on users, deposit addresses and balances (`paystream users add`,
`addresses add [--pool]`, `balances`). The rules are schema/users.py's and schema/balances.py's
(the merchant API applies the same ones); this is the operator's door, one transaction
per action."""

from __future__ import annotations

from datetime import datetime

from paystream.operator_cli import format_table
from paystream.schema import balances as books
from paystream.schema import scan_backfills, users
from paystream.schema.amounts import format_amount
from paystream.schema.balances import BalanceRow as BalanceRow  # re-exported
from paystream.schema.db import Connection, Cursor
from paystream.schema.merchants import DEFAULT_MERCHANT

# An operator request that cannot be carried out; the message says why.
AdminError = users.UserError


def add_user(conn: Connection, user_id: str, merchant_id: str = DEFAULT_MERCHANT) -> bool:
    """Create a user of `merchant_id`; return False if it was that merchant's already."""
    with conn, conn.cursor() as cur:
        return users.add_user(cur, user_id, merchant_id)


def add_address(conn: Connection, network: str, address: str, user_id: str,
                scan_from: int | None = None) -> bool:
    """Assign a deposit address to a user; return False if it already was theirs. With
    `scan_from`, the chain scanner is asked, in the same transaction, to read the
    address's deposits from that block (schema.scan_backfills)."""
    with conn, conn.cursor() as cur:
        added = users.add_address(cur, network, address, user_id)
        if scan_from is not None:
            scan_backfills.request(cur, network, address, scan_from)
        return added


def add_to_pool(conn: Connection, network: str, addresses: list[str]
                ) -> list[tuple[str, str | None]]:
    """Load addresses into the deposit-address pool, from which chain invoices of users
    without a spare address take one each (invoices/create.py), in one transaction:
    (address as stored, None if added or the reason it was refused) for each. Refused:
    not an address, named twice, a user's deposit address already (it credits that
    user), or pooled already (free or taken by an invoice)."""
    done: list[tuple[str, str | None]] = []
    with conn, conn.cursor() as cur:
        for given in addresses:
            try:
                net, address = users.normal_address(network, given)
            except users.UserError as exc:
                done.append((given, str(exc)))
                continue
            done.append((address, _pool_refusal(cur, net, address,
                                                {a for a, why in done if why is None})))
    return done


def _pool_refusal(cur: Cursor, network: str, address: str, added: set[str]) -> str | None:
    """Add one address to the pool; None, or why not."""
    if address in added:
        return "named twice"
    cur.execute("SELECT user_id FROM deposit_addresses WHERE network = %s AND address = %s",
                (network, address))
    owner = cur.fetchone()
    if owner is not None:
        return f"already the deposit address of user {owner[0]}"
    cur.execute("INSERT INTO deposit_address_pool (network, address) VALUES (%s, %s)"
                " ON CONFLICT (network, address) DO NOTHING RETURNING address",
                (network, address))
    if cur.fetchone() is not None:
        return None
    cur.execute("SELECT taken_by FROM deposit_address_pool WHERE network = %s"
                " AND address = %s", (network, address))
    taken = cur.fetchone()
    return ("already in the pool" + (f", taken by invoice {taken[0]}"
                                     if taken is not None and taken[0] else ", free"))


def balances(conn: Connection, user_id: str | None = None,
             at: datetime | None = None) -> list[BalanceRow]:
    """Balances now (the balances rows), or of one user at `at` from the postings."""
    if at is not None and user_id is None:
        raise AdminError("a balance at a point in time needs --user", "missing_user")
    with conn, conn.cursor() as cur:
        return books.read(cur, user_id, None if at is None else at.isoformat())


def render_table(rows: list[BalanceRow]) -> str:
    """A plain text table; amounts in canonical form (no float, no trailing zeros)."""
    return format_table(("user", "asset", "available", "pending", "held"),
                        [(r.user_id, r.asset, format_amount(r.balance),
                          format_amount(r.pending), format_amount(r.held)) for r in rows],
                        right_aligned={2, 3, 4}, rule=True)
