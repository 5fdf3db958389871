"""Statements as the operator reads them: the list, one statement's summary (per result
and per payout), and its lines with their results and decisions. A difference is
unresolved until a decision on it is `done` (decisions.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from paystream.schema.db import Cursor

RESULTS = ("matched", "amount_mismatch", "fee_mismatch", "missing_in_books",
           "missing_at_provider", "duplicate")
PAGE_LIMIT = 500

# The newest decision of a match row: its state.
_LAST = ("LEFT JOIN LATERAL (SELECT d.decision_id, d.action, d.state, d.actor, d.event_id"
         " AS decided_event FROM statement_decisions d WHERE d.match_id = k.match_id"
         " ORDER BY d.decision_id DESC LIMIT 1) d ON true")
# Unresolved (the rule is migration 0036's, the health check's too), with _LAST's `d`.
UNRESOLVED = "statement_unresolved(k.result, d.state)"


@dataclass(frozen=True)
class StatementRow:
    statement_id: int
    provider: str
    file_name: str
    line_count: int
    period_start: datetime | None
    period_end: datetime | None
    imported_at: datetime
    imported_by: str
    unresolved: int


@dataclass(frozen=True)
class LineRow:
    match_id: int | None  # None: a line matched to the event its reference names
    line_no: int | None
    line_id: str | None
    type: str | None
    amount: Decimal | None
    fee: Decimal | None
    currency: str | None
    reference: str | None
    event_id: str | None
    result: str
    detail: str
    decision_id: int | None
    action: str | None
    state: str | None
    # Our event beside the line: its type, amount and user (None: not in the books).
    event_type: str | None = None
    event_amount: Decimal | None = None
    user_id: str | None = None
    key: int = 0  # where the next page starts (lines.after)

    @property
    def label(self) -> str:
        """What names it: the provider's line id, else (missing at provider) our event."""
        return self.line_id or self.event_id or "-"


@dataclass(frozen=True)
class PayoutRow:
    payout_id: str
    paid: Decimal
    settled: Decimal
    lines: int

    @property
    def sums(self) -> bool:
        return self.paid + self.settled == 0


_STATEMENTS = (
    "SELECT s.statement_id, s.provider, s.file_name, s.line_count, s.period_start,"
    " s.period_end, s.imported_at, s.imported_by,"
    f" (SELECT count(*) FROM statement_matches k {_LAST}"
    f"  WHERE k.statement_id = s.statement_id AND {UNRESOLVED})"
    " FROM statements s")


def list_statements(cur: Cursor, limit: int = 100) -> list[StatementRow]:
    """The newest statements first."""
    cur.execute(_STATEMENTS + " ORDER BY s.statement_id DESC LIMIT %s", (limit,))
    return [StatementRow(*row) for row in cur.fetchall()]


def statement(cur: Cursor, statement_id: int) -> StatementRow | None:
    cur.execute(_STATEMENTS + " WHERE s.statement_id = %s", (statement_id,))
    row = cur.fetchone()
    return None if row is None else StatementRow(*row)


def counts(cur: Cursor, statement_id: int) -> dict[str, int]:
    """Lines and events per result (every result named, 0 when none); the lines without
    a row matched by their reference."""
    cur.execute("SELECT result, count(*), count(*) FILTER (WHERE line_no IS NOT NULL)"
                " FROM statement_matches WHERE statement_id = %s GROUP BY result",
                (statement_id,))
    found = {result: (int(n), int(lines)) for result, n, lines in cur.fetchall()}
    cur.execute("SELECT line_count FROM statements WHERE statement_id = %s", (statement_id,))
    row = cur.fetchone()
    total = 0 if row is None else int(row[0])
    other_lines = sum(lines for r, (_, lines) in found.items() if r != "matched")
    return {r: total - other_lines if r == "matched" else found.get(r, (0, 0))[0]
            for r in RESULTS}


def payouts(cur: Cursor, statement_id: int) -> list[PayoutRow]:
    cur.execute("SELECT payout_id, coalesce(sum(amount) FILTER (WHERE type = 'payout'), 0),"
                " coalesce(sum(net) FILTER (WHERE type <> 'payout'), 0),"
                " count(*) FILTER (WHERE type <> 'payout')"
                " FROM statement_lines WHERE statement_id = %s AND payout_id IS NOT NULL"
                " GROUP BY payout_id ORDER BY payout_id LIMIT %s", (statement_id, PAGE_LIMIT))
    return [PayoutRow(*row) for row in cur.fetchall()]


def lines(cur: Cursor, statement_id: int, *, result: str | None = None,
          unresolved_only: bool = False, differences_only: bool = False, after: int = 0,
          limit: int = PAGE_LIMIT) -> list[LineRow]:
    """The statement's rows from `after` (a row's `key`) on: its lines in line order
    (every line, or the matched ones), or its differences (one result's, or every
    difference, or the unresolved ones) in the order they were found."""
    if (result is None or result == "matched") and not (unresolved_only or differences_only):
        return _all_lines(cur, statement_id, result, after, limit)
    where = ["k.statement_id = %(statement)s", "k.match_id > %(after)s"]
    if result is not None:
        where.append("k.result = %(result)s")
    if unresolved_only:
        where.append(UNRESOLVED)
    if differences_only:
        where.append("k.result <> 'matched'")
    cur.execute(
        "SELECT k.match_id, k.line_no, l.line_id, l.type, l.amount, l.fee, l.currency,"
        " l.reference, k.event_id, k.result, k.detail, d.decision_id, d.action, d.state,"
        " e.event_type, e.amount, e.user_id, k.match_id"
        " FROM statement_matches k"
        " LEFT JOIN payment_events e ON e.event_id = k.event_id"
        " LEFT JOIN statement_lines l ON l.statement_id = k.statement_id"
        "  AND l.line_no = k.line_no "
        f"{_LAST} WHERE {' AND '.join(where)}"
        " ORDER BY k.match_id LIMIT %(limit)s",
        {"statement": statement_id, "result": result, "after": after, "limit": limit})
    return [LineRow(*row) for row in cur.fetchall()]


def _all_lines(cur: Cursor, statement_id: int, result: str | None, after: int,
               limit: int) -> list[LineRow]:
    """Lines in line order, with their result (no row: matched by reference)."""
    matched_only = " AND coalesce(k.result, 'matched') = 'matched'" if result else ""
    cur.execute(
        "SELECT k.match_id, l.line_no, l.line_id, l.type, l.amount, l.fee, l.currency,"
        " l.reference, e.event_id, coalesce(k.result, 'matched'), coalesce(k.detail, ''),"
        " d.decision_id, d.action, d.state, e.event_type, e.amount, e.user_id, l.line_no"
        " FROM statement_lines l"
        " LEFT JOIN statement_matches k ON k.statement_id = l.statement_id"
        "  AND k.line_no = l.line_no"
        " LEFT JOIN payment_events e ON e.event_id = CASE WHEN k.match_id IS NULL"
        "  THEN l.reference ELSE k.event_id END "
        f"{_LAST} WHERE l.statement_id = %(statement)s AND l.line_no > %(after)s"
        f"{matched_only} ORDER BY l.line_no LIMIT %(limit)s",
        {"statement": statement_id, "after": after, "limit": limit})
    return [LineRow(*row) for row in cur.fetchall()]
