"""Invoices in the chaos run: gateway invoices created before the traffic, paid by signed
deposits naming them among the run's other requests, checked from the sender's record.

Each invoice's payments are planned so that their order cannot matter (two requests of
one user may reach the ledger in another order than their answers came back): one full
payment (the amount, or within the tolerance), one overpayment, one or two partial
payments whose sum stays below the amount minus the tolerance, or none. What an invoice
must end as is then a function of the sum of its ACCEPTED payments alone, written again
here from docs/invoices.md (and compared with invoices.rules.standing, the product's rule):

  accepted sum                          state     additional    intents (source)
  0                                     new       -             invoice.created (invoice)
  0 < sum < amount - tolerance          new       paid_partial  + invoice.paid_partial
                                                                  per payment (payment)
  amount - tol <= sum <= amount + tol   settled   -             + invoice.settled (invoice)
  sum > amount + tolerance              settled   paid_over     + invoice.settled (invoice)

A settling sum is always one payment, so no payment is ever a partial one first.
Deadlines are two days ahead: nothing expires, and no reminder is due, during a run.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from enum import StrEnum

from paystream.chaos.invariants import InvariantReport, accepted_events
from paystream.chaos.traffic import MIX, InvoicePayment, Kind, Request
from paystream.invoices.create import InvoiceRequest, create
from paystream.invoices.rules import Payments, standing
from paystream.notify.seal import process_sealer
from paystream.schema.amounts import EXACT_CONTEXT
from paystream.schema.db import Cursor

DEADLINE_S = 2 * 24 * 3600
CENT = Decimal("0.01")
HUNDRED = Decimal(100)
# Half the invoices take no tolerance; the others 1 %, 2.5 % or 5 %.
TOLERANCES = (Decimal(0), Decimal(0), Decimal(0), Decimal(1), Decimal("2.5"), Decimal(5))
# Invoices a long run creates at most (each costs its creation's transaction before the
# traffic starts); the payments past them are plain deposits.
MAX_INVOICES = 1000


class Plan(StrEnum):
    FULL = "full"                  # the amount, or a sum within the tolerance
    OVER = "over"                  # past the amount plus the tolerance
    PARTIAL = "partial"            # one payment short of the amount minus the tolerance
    TWO_PARTIALS = "two_partials"  # two, their sum still short
    UNPAID = "unpaid"              # nothing


PLANS = ((Plan.FULL, 0.3), (Plan.OVER, 0.2), (Plan.PARTIAL, 0.2), (Plan.TWO_PARTIALS, 0.2),
         (Plan.UNPAID, 0.1))
PAYMENTS_PER_INVOICE = sum(w * {Plan.TWO_PARTIALS: 2, Plan.UNPAID: 0}.get(p, 1)
                           for p, w in PLANS)


@dataclass
class ChaosInvoice:
    """One of the run's invoices: what it asks for and what the traffic will pay it."""

    user_id: str
    asset: str
    amount: Decimal
    tolerance_pct: Decimal
    plan: Plan
    payments: tuple[Decimal, ...]  # in no particular order
    invoice_id: str = ""           # once created


@dataclass(frozen=True)
class Expected:
    paid: Decimal
    state: str
    additional: str | None

    @property
    def label(self) -> str:
        return self.state + (f"/{self.additional}" if self.additional else "")


def count_for(rate: float, duration_s: float) -> int:
    """Enough invoices for the invoice payments a run of `rate` for `duration_s` draws
    (the last ones planned may go unsent: an invoice short of a payment is checked as
    what it did get)."""
    share = dict(MIX)[Kind.INVOICE_PAYMENT]
    return max(5, min(MAX_INVOICES, math.ceil(rate * duration_s * share
                                              / PAYMENTS_PER_INVOICE)))


def bounds(amount: Decimal, tolerance_pct: Decimal) -> tuple[Decimal, Decimal]:
    """(least that settles, most that settles without paid_over), as docs/invoices.md
    words them: the amount minus, and plus, the tolerance's share of it."""
    with localcontext(EXACT_CONTEXT):
        margin = amount * tolerance_pct / HUNDRED
        return amount - margin, amount + margin


def _cents(rng: random.Random, low: Decimal, high: Decimal) -> Decimal:
    """A whole number of cents from `low` to `high` (both whole cents)."""
    return Decimal(rng.randint(int(low / CENT), int(high / CENT))) * CENT


def plan_invoices(rng: random.Random, users: Sequence[str], assets: Sequence[str],
                  count: int) -> list[ChaosInvoice]:
    """`count` invoices of the run's users and the payments each will get."""
    out = []
    for _ in range(count):
        plan = rng.choices([p for p, _ in PLANS], [w for _, w in PLANS])[0]
        amount = _cents(rng, Decimal(10), Decimal(500))
        tolerance = rng.choice(TOLERANCES)
        least, most = bounds(amount, tolerance)
        # Whole cents inside the settling range, and the last cent short of it.
        lowest_settling = math.ceil(least / CENT) * CENT
        highest_settling = math.floor(most / CENT) * CENT
        short = lowest_settling - CENT
        payments: tuple[Decimal, ...]
        if plan is Plan.FULL:
            payments = (amount if tolerance == 0 or rng.random() < 0.3
                        else _cents(rng, lowest_settling, highest_settling),)
        elif plan is Plan.OVER:
            payments = (highest_settling + _cents(rng, CENT, amount / 5),)
        elif plan is Plan.PARTIAL:
            payments = (_cents(rng, CENT, short),)
        elif plan is Plan.TWO_PARTIALS:
            total = _cents(rng, 2 * CENT, short)
            first = _cents(rng, CENT, total - CENT)
            payments = (first, total - first)
        else:
            payments = ()
        out.append(ChaosInvoice(rng.choice(users), rng.choice(assets), amount, tolerance,
                                plan, payments))
    return out


def create_all(cur: Cursor, invoices: Sequence[ChaosInvoice], run_id: str,
               created_at: str) -> None:
    """Create each invoice as the merchant API does (its own creation function, on the
    API's database role: the caller's cursor), in the caller's transaction; sets ids."""
    for n, invoice in enumerate(invoices):
        status, answer, _ = create(
            cur, key_id=None, idempotency_key=None, created_at_text=created_at,
            sealer=process_sealer(),
            wanted=InvoiceRequest(invoice.user_id, invoice.asset, invoice.amount,
                                  DEADLINE_S, order_id=f"chaos-{run_id}-o{n}",
                                  tolerance_pct=invoice.tolerance_pct))
        if status != 201 or answer.get("address") is not None:
            raise RuntimeError(f"invoice {n} of {invoice.user_id}: {status} {answer}")
        invoice.invoice_id = str(answer["invoice_id"])


def due_payments(invoices: Iterable[ChaosInvoice]) -> list[InvoicePayment]:
    """What the traffic owes the invoices (traffic.py sends them in a random order)."""
    return [InvoicePayment(i.invoice_id, i.user_id, i.asset, str(amount))
            for i in invoices if i.invoice_id for amount in i.payments]


def expect(invoice: ChaosInvoice, paid: Sequence[Decimal]) -> Expected:
    """What the invoice must be after the accepted payments `paid` (the module's table)."""
    least, most = bounds(invoice.amount, invoice.tolerance_pct)
    total = sum(paid, Decimal(0))
    if total >= least:
        return Expected(total, "settled", "paid_over" if total > most else None)
    return Expected(total, "new", "paid_partial" if total > 0 else None)


def accepted_payments(accepted: Iterable[Request]) -> dict[str, list[Request]]:
    """Invoice id -> its accepted payments (requests answered 2xx)."""
    out: dict[str, list[Request]] = {}
    for req in accepted:
        if req.kind is Kind.INVOICE_PAYMENT and req.invoice_id is not None:
            out.setdefault(req.invoice_id, []).append(req)
    return out


def expected_intents(invoices: Iterable[ChaosInvoice], accepted: Iterable[Request]
                     ) -> set[tuple[str, str]]:
    """The (source, type) pairs of the invoice.* intents the run's users must get
    (invoices/notices.py's choices, written again from docs/invoices.md)."""
    paid = accepted_payments(accepted)
    pairs: set[tuple[str, str]] = set()
    for invoice in invoices:
        if not invoice.invoice_id:
            continue
        pairs.add((invoice.invoice_id, "invoice.created"))
        mine = paid.get(invoice.invoice_id, [])
        want = expect(invoice, [Decimal(r.amount) for r in mine])
        if want.state == "settled":
            pairs.add((invoice.invoice_id, "invoice.settled"))
        elif want.additional == "paid_partial":
            pairs.update((r.event_id, "invoice.paid_partial") for r in mine)
    return pairs


def check_invoices(cur: Cursor, v: InvariantReport, invoices: Sequence[ChaosInvoice],
                   sent: list[Request]) -> None:
    """Each invoice as the sender's accepted payments say it must be: amount_paid their
    sum, nothing pending, state and additional status by the module's table (and by
    rules.standing); one credited, on-time invoice_payments row per accepted payment and
    none for anything else; a history of its creation and one line per payment."""
    created = [i for i in invoices if i.invoice_id]
    ids = [i.invoice_id for i in created]
    paid = accepted_payments(accepted_events(sent).values())
    cur.execute("SELECT invoice_id, state, additional_status, amount_paid, amount_pending"
                " FROM invoices WHERE invoice_id = ANY(%s)", (ids,))
    rows = {r[0]: r[1:] for r in cur.fetchall()}
    payment_ids = [r.event_id for reqs in paid.values() for r in reqs]
    cur.execute("SELECT event_id, invoice_id, amount, state, late FROM invoice_payments"
                " WHERE invoice_id = ANY(%s) OR event_id = ANY(%s)", (ids, payment_ids))
    recorded = {r[0]: r[1:] for r in cur.fetchall()}
    cur.execute("SELECT invoice_id, cause FROM invoice_history WHERE invoice_id = ANY(%s)",
                (ids,))
    history: dict[str, Counter[str]] = {}
    for invoice_id, cause in cur.fetchall():
        history.setdefault(invoice_id, Counter())[cause] += 1
    before = len(v.violations) + len(v.lost)
    for invoice in created:
        _check_one(v, invoice, paid.get(invoice.invoice_id, []), rows.get(invoice.invoice_id),
                   recorded, history.get(invoice.invoice_id, Counter()))
    for event_id in sorted(set(recorded) - set(payment_ids)):
        v.violations.append(f"invoice payment {event_id} of {recorded[event_id][0]}: no"
                            " accepted request of the sender's paid it")
    v.invoices["created"] = len(created)
    v.invoices["payments"] = len(payment_ids)
    v.invoices["violations"] = len(v.violations) + len(v.lost) - before


def _check_one(v: InvariantReport, invoice: ChaosInvoice, paid: list[Request],
               row: tuple[str, str | None, Decimal, Decimal] | None,
               recorded: dict[str, tuple[str, Decimal, str, bool]],
               history: Counter[str]) -> None:
    name = f"invoice {invoice.invoice_id} ({invoice.plan}, {invoice.amount} {invoice.asset}"
    name += f" tolerance {invoice.tolerance_pct} %, paid {[r.amount for r in paid]})"
    want = expect(invoice, [Decimal(r.amount) for r in paid])
    v.invoices[want.label] += 1
    rule = standing(invoice.amount, invoice.tolerance_pct, Payments(credited_on_time=want.paid),
                    deadline_passed=False, cancelled=False)
    if (rule.state.value, rule.additional.value if rule.additional else None) != (
            want.state, want.additional):
        v.violations.append(f"{name}: rules.standing says {rule.state.value}/"
                            f"{rule.additional}, the run's table {want.label}")
    if row is None:
        v.lost.append(f"{name}: created, but not in invoices")
        return
    state, additional, amount_paid, amount_pending = row
    if (state, additional, amount_paid, amount_pending) != (
            want.state, want.additional, want.paid, Decimal(0)):
        v.violations.append(f"{name}: {state}/{additional} paid {amount_paid} pending "
                            f"{amount_pending}, want {want.label} paid {want.paid} pending 0")
    for req in paid:
        found = recorded.get(req.event_id)
        if found is None:
            v.lost.append(f"{name}: payment {req.event_id} has no invoice_payments row")
        elif found != (invoice.invoice_id, Decimal(req.amount), "credited", False):
            v.violations.append(f"{name}: payment {req.event_id} recorded as {found}")
    causes = Counter(["created", *(f"payment:{r.event_id}" for r in paid)])
    if history != causes:
        v.violations.append(f"{name}: history {dict(history)}, want {dict(causes)}")


def report_line(v: InvariantReport) -> str:
    """The report's line: the invoices by the standing the sender's record gives them."""
    c = v.invoices
    states = ("settled", "settled/paid_over", "new/paid_partial", "new")
    return (f"invoices: {c['created']} created, {c['payments']} payments accepted; expected"
            " from the sender's record: " + ", ".join(f"{s}={c[s]}" for s in states)
            + f"; invoice violations = {c['violations']}")
