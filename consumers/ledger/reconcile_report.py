"""`paystream reconcile`'s view of the ledger's self-check (consumers/ledger/reconcile.py)
with the features' own checks (paystream/reconcile_checks.py: every invoice matches
its payments): one line when all is clean, else a table per kind of problem (balances,
transfers, custody, each feature's); the open shortfalls (flagged accounts) are listed
either way, without failing the check."""

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
    checked = [f for f in report.features if f.checked]
    if report.clean:
        features = "".join(f", {f.clean_text}" for f in checked)
        return "\n".join([f"reconcile: ok, {report.balances_checked} balances match their "
                          f"accounts' postings, {report.transfers_checked} transfers sum to"
                          f" zero, custody matches the chain deposits held{features}"
                          f" (snapshot at {report.snapshot_at})", *flagged])
    problems = (len(report.mismatches) + len(report.transfer_problems) + len(report.custody)
                + sum(len(f.rows) for f in report.features))
    scopes = [f"{report.balances_checked} balances", f"{report.transfers_checked} transfers",
              *(f"{f.checked} {f.noun}" for f in checked)]
    scope = ", ".join(scopes[:-1]) + f" and {scopes[-1]}"
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
    lines += [format_table(f.columns, f.rows) for f in report.features if f.rows]
    return "\n".join([*lines, *flagged])
