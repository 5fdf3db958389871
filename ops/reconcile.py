"""`paystream reconcile`'s view of the ledger's self-check (consumers/ledger/reconcile.py):
one line when every balance matches its accounts, money is conserved and every invoice
matches its payments, else a table per kind of problem (balances, transfers, custody,
invoices); the
open shortfalls (flagged accounts) are listed either way, without failing the check."""

from __future__ import annotations

from paystream.consumers.ledger.reconcile import Report
from paystream.operator_cli import format_table
from paystream.schema.amounts import format_amount
from paystream.schema.transfers import signed


def format_report(report: Report) -> str:
    """The operator's view: one line when clean, else a table of the mismatches."""
    flagged = [f"flagged: {s.user_id} owes {format_amount(s.owed)} {s.asset} "
               f"(open shortfall of {s.source_event_id}; withdrawals refused)"
               for s in report.flagged]
    if report.clean:
        invoices = (f", {report.invoices_checked} invoices match their payments"
                    if report.invoices_checked else "")
        return "\n".join([f"reconcile: ok, {report.balances_checked} balances match their "
                          f"accounts' postings, {report.transfers_checked} transfers sum to"
                          f" zero, custody matches the chain deposits held{invoices}"
                          f" (snapshot at {report.snapshot_at})", *flagged])
    problems = (len(report.mismatches) + len(report.transfer_problems) + len(report.custody)
                + len(report.invoices))
    scope = (f"{report.balances_checked} balances, {report.transfers_checked} transfers and"
             f" {report.invoices_checked} invoices" if report.invoices_checked else
             f"{report.balances_checked} balances and {report.transfers_checked} transfers")
    lines = [f"reconcile: {problems} MISMATCH(ES) among {scope}"
             f" (snapshot at {report.snapshot_at})"]
    if report.mismatches:
        lines.append(format_table(
            ("book", "user", "asset", "balance", "postings_sum", "difference", "problem"),
            [(m.book, m.user_id, m.asset,
              "-" if m.balance is None else format_amount(m.balance),
              signed(m.journal), signed(m.difference), m.problem)
             for m in report.mismatches]))
    if report.transfer_problems:
        lines.append(format_table(
            ("transfer", "asset", "problem", "detail"),
            [("-" if t.transfer_id is None else str(t.transfer_id), t.asset or "-",
              t.problem, t.detail) for t in report.transfer_problems]))
    if report.custody:
        lines.append(format_table(
            ("network", "asset", "custody", "deposits_held", "on_chain", "problem"),
            [(c.network, c.asset, signed(c.books), signed(c.deposits),
              "-" if c.on_chain is None else signed(c.on_chain), c.problem)
             for c in report.custody]))
    if report.invoices:
        lines.append(format_table(
            ("invoice", "user", "state", "amount", "amount_paid", "credited_payments",
             "amount_pending", "pending_payments", "problem"),
            [(i.invoice_id, i.user_id, i.state, format_amount(i.amount), signed(i.amount_paid),
              signed(i.credited), signed(i.amount_pending), signed(i.pending),
              ", ".join(i.problems)) for i in report.invoices]))
    return "\n".join([*lines, *flagged])
