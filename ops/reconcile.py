"""`paystream reconcile`'s view of the ledger's self-check (consumers/ledger_reconcile.py):
one line when every balance matches its journal, else a table of the mismatches; the
open shortfalls (flagged accounts) are listed either way, without failing the check."""

from __future__ import annotations

from paystream.consumers.ledger_reconcile import Report
from paystream.operator_cli import format_table
from paystream.schema.amounts import format_amount


def format_report(report: Report) -> str:
    """The operator's view: one line when clean, else a table of the mismatches."""
    flagged = [f"flagged: {s.user_id} owes {format_amount(s.owed)} {s.asset} "
               f"(open shortfall of {s.source_event_id}; withdrawals refused)"
               for s in report.flagged]
    if report.clean:
        return "\n".join([f"reconcile: ok, {report.balances_checked} balances match their "
                          f"journal (snapshot at {report.snapshot_at})", *flagged])
    table = format_table(
        ("book", "user", "asset", "balance", "journal_sum", "difference", "problem"),
        [(m.book, m.user_id, m.asset,
          "-" if m.balance is None else format_amount(m.balance),
          format_amount(m.journal), format_amount(m.difference), m.problem)
         for m in report.mismatches])
    return "\n".join([f"reconcile: {len(report.mismatches)} MISMATCH(ES) among "
                      f"{report.balances_checked} balances (snapshot at "
                      f"{report.snapshot_at})", table, *flagged])
