"""An invoice row as Python reads it, and the one column list every reader selects."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from paystream.invoices.rules import Additional, State
from paystream.schema.db import Cursor

ID_PREFIX = "inv_"

COLUMNS = ("invoice_id, user_id, asset, amount, tolerance_pct, order_id, metadata, network,"
           " address, expires_at, state, additional_status, amount_paid, amount_pending,"
           " created_at, updated_at")


@dataclass(frozen=True)
class Invoice:
    invoice_id: str
    user_id: str
    asset: str
    amount: Decimal
    tolerance_pct: Decimal
    order_id: str | None
    metadata: dict[str, Any]
    network: str | None
    address: str | None
    expires_at: datetime
    state: State
    additional: Additional | None
    amount_paid: Decimal
    amount_pending: Decimal
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Invoice:
        """A row selected with COLUMNS."""
        values = list(row)
        values[10] = State(values[10])
        values[11] = Additional(values[11]) if values[11] is not None else None
        return cls(*values)


def fetch(cur: Cursor, invoice_id: str, *, lock: bool = False) -> Invoice | None:
    """The invoice `invoice_id` (locked FOR UPDATE when `lock`), or None."""
    cur.execute(f"SELECT {COLUMNS} FROM invoices WHERE invoice_id = %s"
                + (" FOR UPDATE" if lock else ""), (invoice_id,))
    row = cur.fetchone()
    return Invoice.from_row(row) if row is not None else None


def record_history(cur: Cursor, invoice: Invoice, cause: str) -> None:
    """One line of the invoice's status history: its state now and what caused it."""
    cur.execute("INSERT INTO invoice_history (invoice_id, state, additional_status,"
                " expires_at, cause) VALUES (%s, %s, %s, %s, %s)",
                (invoice.invoice_id, invoice.state.value,
                 invoice.additional.value if invoice.additional else None,
                 invoice.expires_at, cause[:300]))
