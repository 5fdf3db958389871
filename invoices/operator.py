"""The operator's invoice actions (`paystream invoices list | show | extend | cancel`):
the rules here, the command line in ops/invoices_cli.py.

- extend: an open invoice's deadline moved later. The reminders follow from their key
  (`invoice_unpaid:<invoice>:<deadline>:<offset>`): a new deadline is a new cycle;
- cancel: an open invoice nothing was paid toward (nothing credited, nothing pending)
  becomes invalid, and its user is told (invoice.invalid).
Each is one transaction that locks the invoice, writes it, its history line and its
intents (notices.of_change) together; a refusal writes nothing and says why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from paystream.invoices import notices, rules
from paystream.invoices.model import COLUMNS, Invoice, fetch, record_history
from paystream.notify.intents import Intent, now_text, outbox_batches
from paystream.schema.db import Cursor
from paystream.schema.events import NOTIFICATIONS_AGGREGATE
from paystream.schema.outbox import publish

LIST_LIMIT_MAX = 1000


class InvoiceRefused(ValueError):  # noqa: N818 - a refusal, not an error of the program
    """An operator request refused before anything was written; says why."""


@dataclass(frozen=True)
class Payment:
    event_id: str
    amount: Decimal
    state: str
    seen_at: datetime
    late: bool
    recorded_at: datetime
    credited_at: datetime | None


@dataclass(frozen=True)
class HistoryLine:
    at: datetime
    state: str
    additional_status: str | None
    expires_at: datetime
    cause: str


@dataclass(frozen=True)
class Detail:
    invoice: Invoice
    payments: list[Payment]
    history: list[HistoryLine]


@dataclass(frozen=True)
class Changed:
    before: Invoice
    after: Invoice
    intents: list[Intent]


def listing(cur: Cursor, *, state: str | None = None, user_id: str | None = None,
            order_id: str | None = None, limit: int = 50) -> list[Invoice]:
    """Invoices matching every filter given, newest first."""
    if state is not None and state not in {s.value for s in rules.State}:
        raise InvoiceRefused(f"unknown state {state!r}: one of "
                             + ", ".join(s.value for s in rules.State))
    if not 1 <= limit <= LIST_LIMIT_MAX:
        raise InvoiceRefused(f"the limit must be 1 to {LIST_LIMIT_MAX}, not {limit}")
    where, params = [], []
    for column, value in (("state", state), ("user_id", user_id), ("order_id", order_id)):
        if value is not None:
            where.append(f"{column} = %s")
            params.append(value)
    cur.execute(f"SELECT {COLUMNS} FROM invoices"
                + (" WHERE " + " AND ".join(where) if where else "")
                + " ORDER BY created_at DESC, invoice_id DESC LIMIT %s", (*params, limit))
    return [Invoice.from_row(row) for row in cur.fetchall()]


def detail(cur: Cursor, invoice_id: str) -> Detail:
    """The invoice with its payments and its status history, oldest first."""
    invoice = _found(cur, invoice_id, lock=False)
    cur.execute("SELECT event_id, amount, state, seen_at, late, recorded_at, credited_at"
                " FROM invoice_payments WHERE invoice_id = %s ORDER BY recorded_at, event_id",
                (invoice_id,))
    payments = [Payment(*row) for row in cur.fetchall()]
    cur.execute("SELECT at, state, additional_status, expires_at, cause FROM invoice_history"
                " WHERE invoice_id = %s ORDER BY id", (invoice_id,))
    return Detail(invoice, payments, [HistoryLine(*row) for row in cur.fetchall()])


def extend(cur: Cursor, invoice_id: str, by_s: float) -> Changed:
    """An open invoice's deadline `by_s` seconds later (history `extended`)."""
    if by_s <= 0:
        raise InvoiceRefused(f"extend by a positive duration, not {by_s:g} s")
    before = _found(cur, invoice_id, lock=True)
    if not before.state.is_open:
        raise InvoiceRefused(f"{invoice_id} is {before.state.value}: only an open invoice"
                             " (new, processing) can be extended")
    deadline = before.expires_at + timedelta(seconds=by_s)
    # The database's clock judges "passed", as it judges every deadline.
    cur.execute("UPDATE invoices SET expires_at = %(deadline)s, updated_at = now()"
                " WHERE invoice_id = %(id)s AND %(deadline)s::timestamptz > now()"
                " RETURNING expires_at", {"deadline": deadline, "id": invoice_id})
    row = cur.fetchone()
    if row is None:
        raise InvoiceRefused(f"{invoice_id}'s deadline {before.expires_at.isoformat()} plus"
                             f" {by_s:g} s has passed already: extend it by more")
    after = replace(before, expires_at=row[0])
    record_history(cur, after, "extended")
    return Changed(before, after, _tell(cur, before, after))


def cancel(cur: Cursor, invoice_id: str) -> Changed:
    """An open, unpaid invoice made invalid (history `cancelled`, invoice.invalid)."""
    before = _found(cur, invoice_id, lock=True)
    if not before.state.is_open:
        raise InvoiceRefused(f"{invoice_id} is {before.state.value}: only an open invoice"
                             " (new, processing) can be cancelled")
    if before.amount_paid > 0 or before.amount_pending > 0:
        raise InvoiceRefused(f"{invoice_id} has payments ({before.amount_paid} credited,"
                             f" {before.amount_pending} pending): only an unpaid invoice"
                             " can be cancelled")
    standing = rules.standing(before.amount, before.tolerance_pct, rules.Payments(),
                              deadline_passed=False, cancelled=True)
    after = replace(before, state=standing.state, additional=standing.additional)
    cur.execute("UPDATE invoices SET state = %s, additional_status = %s, updated_at = now()"
                " WHERE invoice_id = %s",
                (after.state.value, after.additional.value if after.additional else None,
                 invoice_id))
    record_history(cur, after, "cancelled")
    return Changed(before, after, _tell(cur, before, after))


def _found(cur: Cursor, invoice_id: str, *, lock: bool) -> Invoice:
    invoice = fetch(cur, invoice_id, lock=lock)
    if invoice is None:
        raise InvoiceRefused(f"no invoice {invoice_id!r}")
    return invoice


def _tell(cur: Cursor, before: Invoice, after: Invoice) -> list[Intent]:
    """The change's intents, written to the outbox in the caller's transaction."""
    made = notices.of_change(before, after, now_text())
    if made:
        publish(cur, NOTIFICATIONS_AGGREGATE,
                outbox_batches([(i, after.invoice_id) for i in made], after.user_id))
    return made
