"""The invoice check `paystream reconcile` runs beside the ledger's (registered by the
command, paystream/reconcile_checks.py: the ledger knows no feature): an invoice's sums are its
payments', and a settled one was paid.

The ledger keeps an invoice's amount_paid and amount_pending as sums of its payments
(invoices/matching.py writes both in the transaction that moves the money), so they must
equal what invoice_payments holds: credited payments (less what refunds took back of
them) for amount_paid, pending ones for amount_pending. A `settled` invoice must
moreover have been paid on time at least its amount minus its tolerance
(invoices/rules.py's settling rule). Anything else is a
mismatch: a write outside the ledger, or a bug in the matching.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor, one_row
from paystream.schema.transfers import signed

SETTLED_UNPAID = "settled_unpaid"
PAID_DIFFERS = "amount_paid_differs"
PENDING_DIFFERS = "amount_pending_differs"


@dataclass(frozen=True)
class InvoiceMismatch:
    invoice_id: str
    user_id: str
    state: str
    amount: Decimal
    amount_paid: Decimal       # what the invoice row says
    credited: Decimal          # what its credited payments sum to
    credited_on_time: Decimal
    amount_pending: Decimal
    pending: Decimal
    least: Decimal             # amount minus tolerance: what settles it

    @property
    def problems(self) -> list[str]:
        found = []
        if self.amount_paid != self.credited:
            found.append(PAID_DIFFERS)
        if self.amount_pending != self.pending:
            found.append(PENDING_DIFFERS)
        if self.state == "settled" and self.credited_on_time < self.least:
            found.append(SETTLED_UNPAID)
        return found


# NUMERIC multiplication is exact (a division would round to its chosen scale).
_SQL = """
    WITH paid AS (
        SELECT invoice_id,
               coalesce(sum(amount - refunded) FILTER (WHERE state = 'credited'), 0)
                   AS credited,
               coalesce(sum(amount - refunded) FILTER (WHERE state = 'credited'
                                                       AND NOT late), 0) AS on_time,
               coalesce(sum(amount) FILTER (WHERE state = 'pending'), 0) AS pending
        FROM invoice_payments GROUP BY invoice_id
    ), judged AS (
        SELECT i.invoice_id, i.user_id, i.state, i.amount, i.amount_paid,
               coalesce(p.credited, 0) AS credited, coalesce(p.on_time, 0) AS on_time,
               i.amount_pending, coalesce(p.pending, 0) AS pending,
               i.amount - i.amount * i.tolerance_pct * 0.01 AS least
        FROM invoices i LEFT JOIN paid p USING (invoice_id) {where}
    )
    SELECT * FROM judged
    WHERE amount_paid <> credited OR amount_pending <> pending
       OR (state = 'settled' AND on_time < least)
    ORDER BY invoice_id"""


def find_invoice_mismatches(cur: Cursor, users: Sequence[str] | None = None
                            ) -> tuple[int, list[InvoiceMismatch]]:
    """(invoices checked, those whose sums or settlement their payments contradict), in
    `cur`'s snapshot; every invoice, or those of `users`."""
    where, params = "", {}
    if users is not None:
        where, params = "WHERE i.user_id = ANY(%(users)s::text[])", {"users": list(users)}
    cur.execute("SELECT count(*) FROM invoices i " + where, params)
    checked = int(one_row(cur)[0])
    cur.execute(_SQL.format(where=where), params)
    return checked, [InvoiceMismatch(*row) for row in cur.fetchall()]


COLUMNS = ("invoice", "user", "state", "amount", "amount_paid", "credited_payments",
           "amount_pending", "pending_payments", "problem")


def table_rows(found: Sequence[InvoiceMismatch]) -> list[tuple[str, ...]]:
    """The mismatches as rows of reconcile's table, under COLUMNS."""
    return [(i.invoice_id, i.user_id, i.state, format_amount(i.amount), signed(i.amount_paid),
             signed(i.credited), signed(i.amount_pending), signed(i.pending),
             ", ".join(i.problems)) for i in found]
