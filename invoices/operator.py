"""The operator's invoice rule of its own: `paystream invoices extend ID --by 1h` (the
command line is invoices/cli.py; list and show are invoices/reads.py's, cancel is
invoices/create.py's, the merchant API's rule, so both doors refuse the same).

An open invoice's deadline moves later, in one transaction that locks the invoice and
writes the new deadline and its history line (`extended`). No intent: its state did not
change. The reminders follow from their key (`invoice_unpaid:<invoice>:<deadline>:
<offset>`): a new deadline is a new cycle, every step of it reminded once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

from paystream.invoices.model import Invoice, fetch, record_history
from paystream.refusals import Conflict, Invalid, NotFound
from paystream.schema.db import Cursor

CAUSE = "extended"


@dataclass(frozen=True)
class Extended:
    before: Invoice
    after: Invoice


def extend(cur: Cursor, invoice_id: str, by_s: float) -> Extended:
    """An open invoice's deadline `by_s` seconds later (history `extended`).
    Invalid for a duration that is not positive, NotFound, or
    Conflict with the reason (not open; the new deadline already passed)."""
    if by_s <= 0:
        raise Invalid(f"extend by a positive duration, not {by_s:g} s")
    before = fetch(cur, invoice_id, lock=True)
    if before is None:
        raise NotFound(f"no invoice {invoice_id[:200]!r}", code="unknown_invoice")
    if not before.state.is_open:
        raise Conflict(f"invoice {invoice_id} is {before.state.value}: only an open"
                            " (new or processing) invoice can be extended",
                            code="invoice_not_open")
    deadline = before.expires_at + timedelta(seconds=by_s)
    # The database's clock judges "passed", as it judges every deadline.
    cur.execute("UPDATE invoices SET expires_at = %(deadline)s, updated_at = now()"
                " WHERE invoice_id = %(id)s AND %(deadline)s::timestamptz > now()"
                " RETURNING expires_at", {"deadline": deadline, "id": invoice_id})
    row = cur.fetchone()
    if row is None:
        raise Conflict(f"invoice {invoice_id}'s deadline {before.expires_at.isoformat()}"
                            f" plus {by_s:g} s has passed already: extend it by more",
                            code="deadline_passed")
    after = replace(before, expires_at=row[0])
    record_history(cur, after, CAUSE)
    return Extended(before, after)
