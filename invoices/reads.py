"""Invoices as a reader sees them: one with its payments and status history, and pages
of them newest first, for the merchant API and the operator (`paystream invoices
list|show`), as JSON: amounts canonical strings, times ISO 8601 in UTC.

A page is a keyset walk on (created_at, invoice_id), newest first, each filter served
by its index of migration 0025 (by user, order id, state; additional status: 0026), so
no filter reads the table past its page. The cursor is opaque to the caller: the last
invoice's (created_at, invoice_id), base64url. An invoice created while a caller walks
the pages is newer than the walk's start and is shown on a fresh first page, never twice
and never in place of another.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from paystream.invoices import model
from paystream.invoices.model import Invoice
from paystream.invoices.rules import Additional, State, amount_due
from paystream.refusals import Invalid
from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor

# What ?status= may be: a state or an additional status.
STATES = frozenset(s.value for s in State)
STATUSES = tuple(s.value for s in State) + tuple(a.value for a in Additional)
CURSOR_MAX = 400  # characters: base64 of a timestamp and an id of at most 200
DEFAULT_LIMIT = 50


def _text(amount: Decimal) -> str:
    return format_amount(amount) if amount > 0 else "0"


def _time(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def summary(invoice: Invoice) -> dict[str, Any]:
    """The invoice as POST /v1/invoices and a page answer it."""
    return {
        "invoice_id": invoice.invoice_id, "user_id": invoice.user_id,
        "asset": invoice.asset, "amount": _text(invoice.amount),
        "amount_paid": _text(invoice.amount_paid),
        "amount_pending": _text(invoice.amount_pending),
        "amount_due": _text(amount_due(invoice.amount, invoice.amount_paid)),
        "state": invoice.state.value,
        "additional_status": invoice.additional.value if invoice.additional else None,
        "expires_at": _time(invoice.expires_at), "created_at": _time(invoice.created_at),
        "updated_at": _time(invoice.updated_at), "order_id": invoice.order_id,
        "metadata": invoice.metadata, "network": invoice.network,
        "address": invoice.address,
        "payment_tolerance_pct": _text(invoice.tolerance_pct),
    }


def invoice(cur: Cursor, invoice_id: str) -> dict[str, Any] | None:
    """The invoice with its payments (oldest first: event id, amount, what refunds took
    back of it, state, seen_at, late) and its status history (oldest first, with times
    and causes); None if there is no such invoice."""
    found = model.fetch(cur, invoice_id)
    if found is None:
        return None
    cur.execute("SELECT event_id, amount, refunded, state, seen_at, late, recorded_at,"
                " credited_at FROM invoice_payments WHERE invoice_id = %s"
                " ORDER BY recorded_at, event_id", (invoice_id,))
    payments = [{"event_id": e, "amount": _text(a), "refunded": _text(back), "state": s,
                 "seen_at": _time(seen), "late": late, "recorded_at": _time(rec),
                 "credited_at": _time(cred)}
                for e, a, back, s, seen, late, rec, cred in cur.fetchall()]
    cur.execute("SELECT state, additional_status, expires_at, cause, at FROM invoice_history"
                " WHERE invoice_id = %s ORDER BY id", (invoice_id,))
    history = [{"state": s, "additional_status": a, "expires_at": _time(e),
                "cause": c, "at": _time(at)}
               for s, a, e, c, at in cur.fetchall()]
    return {**summary(found), "payments": payments, "history": history}


def parse_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    """The (created_at, invoice_id) a cursor names (None: the first page); 400 if it is
    not one this API returned."""
    if cursor is None or cursor == "":
        return None
    try:
        if len(cursor) > CURSOR_MAX:
            raise ValueError("too long")
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        at_text, invoice_id = text.split("|", 1)
        at = datetime.fromisoformat(at_text)
        if at.tzinfo is None or not invoice_id or not invoice_id.isascii() or not (
                invoice_id.isprintable()):
            raise ValueError("not a cursor")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Invalid("cursor is not one this API returned",
                                  code="invalid_cursor") from None
    return at, invoice_id


def cursor_of(invoice: Invoice) -> str:
    text = f"{invoice.created_at.isoformat()}|{invoice.invoice_id}"
    return base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii").rstrip("=")


def page_query(*, status: str | None = None, order_id: str | None = None,
               user_id: str | None = None, after: tuple[datetime, str] | None = None,
               limit: int = DEFAULT_LIMIT) -> tuple[str, dict[str, Any]]:
    """The statement of `page` and its parameters (the tests EXPLAIN it)."""
    where: list[str] = []
    params: dict[str, Any] = {"limit": limit + 1}
    if status is not None:
        if status not in STATUSES:
            raise Invalid(f"status must be one of {', '.join(STATUSES)}",
                                      code="invalid_status")
        column = "state" if status in STATES else "additional_status"
        where.append(f"{column} = %(status)s")
        params["status"] = status
    if order_id is not None:
        where.append("order_id = %(order_id)s")
        params["order_id"] = order_id
    if user_id is not None:
        where.append("user_id = %(user_id)s")
        params["user_id"] = user_id
    if after is not None:
        where.append("(created_at, invoice_id) < (%(at)s, %(id)s)")
        params["at"], params["id"] = after
    return (f"SELECT {model.COLUMNS} FROM invoices"
            + (" WHERE " + " AND ".join(where) if where else "")
            + " ORDER BY created_at DESC, invoice_id DESC LIMIT %(limit)s"), params


def page(cur: Cursor, *, status: str | None = None, order_id: str | None = None,
         user_id: str | None = None, after: tuple[datetime, str] | None = None,
         limit: int = DEFAULT_LIMIT) -> tuple[list[dict[str, Any]], str | None]:
    """One page of invoices, newest first, matching every filter given (`status`: a
    state or an additional status), after the cursor `after` (parse_cursor); and the
    next page's cursor (None on the last)."""
    cur.execute(*page_query(status=status, order_id=order_id, user_id=user_id, after=after,
                            limit=limit))
    found = [Invoice.from_row(row) for row in cur.fetchall()]
    if len(found) <= limit:
        return [summary(i) for i in found], None
    found = found[:limit]
    return [summary(i) for i in found], cursor_of(found[-1])
