"""Driving the ledger handler directly, inside one transaction, as the consumer does."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from paystream.consume import ledger_handler
from paystream.consumers.commit import apply_with_isolation
from paystream.consumers.handler import BatchResult
from paystream.consumers.records import Record
from paystream.schema import accounts, transfers
from paystream.schema.accounts import AccountKind, AccountRef
from paystream.schema.db import Connection, Cursor


def ledger_apply(conn: Connection, records: list[Record], also: Sequence[str] = ()
                 ) -> BatchResult:
    """One batch through the ledger, as the commit protocol's steps 1, 2 and 5 run it;
    `also`: packages whose consequences it runs beside the product's (ledger_handler)."""
    try:
        result = apply_with_isolation(conn, ledger_handler(also), records)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return result


def plant_transfer(cur: Cursor, source_event_id: str, event_type: str, user_id: str,
                   asset: str, amount: Decimal, book: AccountKind = AccountKind.AVAILABLE,
                   counter: AccountRef | None = None) -> None:
    """Test-only: a balanced transfer written by the ledger's own writer, moving `amount`
    into the user's `book` from `counter` (the asset's opening account by default). The
    balances row is not touched: a test plants it as it needs."""
    user = AccountRef.user(book, user_id, asset)
    other = counter or AccountRef.platform(AccountKind.OPENING, asset)
    ids = accounts.resolve(cur, [user, other])
    transfers.write(cur, [transfers.NewTransfer(
        source_event_id, event_type, [(ids[user], asset, amount), (ids[other], asset, -amount)])])
