"""The invoice expiry scheduler: open invoices past their deadline with nothing pending,
expired in the style of the hold expiry (consumers/ledger/hold_expiry.py).

Each round is one transaction that
  1. claims up to `limit` open invoices (new, processing) past expires_at with no
     payment pending (amount_pending = 0), oldest deadline first, `FOR UPDATE SKIP
     LOCKED`: a second scheduler (or the ledger matching a payment) holding a row makes
     this one pass it by, never wait for it or expire it twice;
  2. recomputes each one's standing from its payments with the deadline passed
     (rules.standing: expired, paid_partial or paid_late as its payments say);
  3. writes the change, its history line (`expired`) and the intents notices.of_change
     makes (invoice.expired, ...) to the outbox, in the same transaction.
What is done is in the table, not in memory: a crash between rounds loses nothing, a
restart repeats nothing, and a full round is taken again at once so a backlog drains
without waiting for the next period. Expired is not final: a payment made before the
deadline that reaches the ledger afterwards still wins (the ledger recomputes).
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import NoReturn

import structlog

from paystream.invoices import notices, rules
from paystream.invoices.model import COLUMNS, Invoice, record_history
from paystream.notify.intents import Intent, now_text, outbox_batches
from paystream.notify.seal import Sealer
from paystream.operator_cli import transaction
from paystream.schema.db import Cursor
from paystream.schema.events import NOTIFICATIONS_AGGREGATE
from paystream.schema.outbox import publish

log = structlog.get_logger("invoices.expiry")

CAUSE = "expired"


@dataclass(frozen=True)
class Expired:
    before: Invoice
    after: Invoice
    intents: tuple[Intent, ...]
    trace_id: str


def payments_of(cur: Cursor, invoice_ids: list[str]) -> dict[str, rules.Payments]:
    """Each invoice's payments summed as the state rules read them (none: no row)."""
    cur.execute(
        "SELECT invoice_id,"
        " coalesce(sum(amount) FILTER (WHERE state = 'credited' AND NOT late), 0),"
        " coalesce(sum(amount) FILTER (WHERE state = 'pending' AND NOT late), 0),"
        " coalesce(sum(amount) FILTER (WHERE state = 'credited' AND late), 0)"
        " FROM invoice_payments WHERE invoice_id = ANY(%s) GROUP BY invoice_id",
        (invoice_ids,))
    return {row[0]: rules.Payments(Decimal(row[1]), Decimal(row[2]), Decimal(row[3]))
            for row in cur.fetchall()}


def at_deadline(before: Invoice, paid: rules.Payments) -> Invoice | None:
    """The invoice as its deadline leaves it (rules.standing with the deadline passed),
    or None while a payment made on time is still pending: the ledger's next word moves
    it, and expiring it here would say what is not so."""
    standing = rules.standing(before.amount, before.tolerance_pct, paid,
                              deadline_passed=True, cancelled=False)
    if standing.state.is_open:
        return None
    return replace(before, state=standing.state, additional=standing.additional)


def expire_due(cur: Cursor, limit: int, sealer: Sealer) -> list[Expired]:
    """Steps 1 to 3 in the caller's transaction; returns what changed."""
    # Step 1. The claim.
    cur.execute(
        f"SELECT {COLUMNS} FROM invoices WHERE state IN ('new', 'processing')"
        " AND expires_at < now() AND amount_pending = 0"
        " ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED", (limit,))
    claimed = [Invoice.from_row(row) for row in cur.fetchall()]
    if not claimed:
        return []
    # Step 2. Each one's standing with the deadline passed.
    paid = payments_of(cur, [i.invoice_id for i in claimed])
    created_at = now_text()
    done: list[Expired] = []
    for before in claimed:
        after = at_deadline(before, paid.get(before.invoice_id, rules.Payments()))
        if after is None:
            log.warning("invoice_expiry_skipped_pending", invoice_id=before.invoice_id)
            continue
        made = notices.of_change(before, after, created_at)
        done.append(Expired(before, after, tuple(made), uuid.uuid4().hex))
    if not done:
        return []
    # Step 3. The change, its history line and its intents, in this transaction.
    cur.execute(
        "UPDATE invoices AS i SET state = c.state, additional_status = c.additional,"
        " updated_at = now() FROM unnest(%s::text[], %s::text[], %s::text[])"
        " AS c(invoice_id, state, additional) WHERE i.invoice_id = c.invoice_id",
        ([e.after.invoice_id for e in done], [e.after.state.value for e in done],
         [e.after.additional.value if e.after.additional else None for e in done]))
    for e in done:
        record_history(cur, e.after, CAUSE)
    by_user: dict[str, list[tuple[Intent, str]]] = defaultdict(list)
    for e in done:
        by_user[e.after.user_id].extend((i, e.trace_id) for i in e.intents)
    # Keyed by the user, as every intent: a user's intents keep one partition, in order.
    publish(cur, NOTIFICATIONS_AGGREGATE,
            [m for user, pairs in by_user.items() for m in outbox_batches(pairs, user, sealer)])
    return done


def expire_round(limit: int, sealer: Sealer) -> list[Expired]:
    """One round in its own transaction (the operator's role); log each change."""
    with transaction("paystream-invoices-expire") as cur:
        done = expire_due(cur, limit, sealer)
    for e in done:
        log.info("invoice_expired", trace_id=e.trace_id, invoice_id=e.after.invoice_id,
                 user_id=e.after.user_id, state=e.after.state.value,
                 additional_status=e.after.additional.value if e.after.additional else None,
                 expires_at=e.after.expires_at.isoformat())
    return done


def run_forever(limit: int, interval_s: float, sealer: Sealer) -> NoReturn:
    """Rounds until the process is stopped; a full round is followed by the next at once."""
    while True:
        if len(expire_round(limit, sealer)) < limit:
            time.sleep(interval_s)
