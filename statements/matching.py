"""Every line of a statement against the books, set-based (a few statements for a
million lines, no Python loop over them): docs/statements.md, "Matching".

  1. by reference: a payment, refund or chargeback line whose `reference` is the id of
     an event of ours from that provider (payment_events);
  2. then, for a line without a reference, by type, currency, amount (within the amount
     tolerance) and time (its `created` within the window of the event's receipt): each
     such line takes the nearest event in time that it is also the nearest line of;
  3. a payout against its lines: their nets must sum to what it pays out.

Results, one per line: matched, amount_mismatch (amount, type or currency differ; a
payout that does not sum), fee_mismatch (a payment's fee other than the contract's),
missing_in_books (no such event of ours), duplicate (a line id already imported in an
earlier statement, or a second line naming the same event); and one row per event of
ours in the statement's period and currencies that no line names: missing_at_provider.
A line matched to the event its reference names, the bulk of a statement, gets no row:
no row is that result (a million inserts saved).

"In the books" means recorded in payment_events: the event the provider's webhook
delivered, whatever the ledger then judged. A result with a decision (decisions.py) is
kept when the statement is matched again; the others are replaced.
"""

from __future__ import annotations

from typing import Any

from paystream.schema.db import Cursor, one_row
from paystream.statements.settings import StatementSettings

# Sorts and hashes of a million lines in memory, not in temporary files (the default
# 4MB spilled the reference sort to disk); for this transaction only.
WORK_MEM = "64MB"
# The event type a line of each type names in the books.
_EVENT_TYPE = ("CASE m.type WHEN 'payment' THEN 'deposit' WHEN 'refund' THEN 'refund'"
               " WHEN 'chargeback' THEN 'chargeback' END")

# The lines to match (those without a kept result) in a temporary table of our own: its
# statistics, unlike those of statement_lines just written (which the operator may not
# ANALYZE), tell the planner it holds a million rows, not one to loop over.
_TO_MATCH = """
CREATE TEMPORARY TABLE match_lines ON COMMIT DROP AS
SELECT line_no, line_id, type, amount, fee, currency, created, reference, payout_id
FROM statement_lines
WHERE statement_id = %(statement)s
  AND line_no NOT IN (SELECT k.line_no FROM statement_matches k
                      WHERE k.statement_id = %(statement)s AND k.line_no IS NOT NULL)
"""

_LINES = """
CREATE TEMPORARY TABLE line_match ON COMMIT DROP AS
WITH repeated AS (  -- references named by more than one line, and the first of them
    SELECT reference, min(line_no) AS first_line FROM statement_lines
    WHERE statement_id = %(statement)s AND reference IS NOT NULL
    GROUP BY reference HAVING count(*) > 1
)
SELECT l.*, e.event_id, e.event_type, e.asset, e.amount AS event_amount, r.first_line,
       (SELECT min(o.statement_id) FROM statement_lines o
        JOIN statements s ON s.statement_id = o.statement_id
        WHERE o.line_id = l.line_id AND o.statement_id < %(statement)s
          AND s.provider = %(provider)s) AS seen_in
FROM match_lines l
LEFT JOIN payment_events e ON e.event_id = l.reference AND e.provider = %(provider)s
    AND l.type IN ('payment', 'refund', 'chargeback')
LEFT JOIN repeated r ON r.reference = l.reference
"""

# Our events a line could name: the provider's credits and reversals around the period,
# in the statement's currencies, that no line named by reference and no kept result has.
_OURS = """
CREATE TEMPORARY TABLE ours ON COMMIT DROP AS
SELECT e.event_id, e.event_type, e.asset, e.amount, e.received_at
FROM payment_events e
WHERE e.provider = %(provider)s AND e.event_type IN ('deposit', 'refund', 'chargeback')
  AND e.received_at BETWEEN %(start)s::timestamptz - make_interval(secs => %(window)s)
                        AND %(end)s::timestamptz + make_interval(secs => %(window)s)
  AND upper(e.asset) = ANY(%(currencies)s)
  AND NOT EXISTS (SELECT 1 FROM line_match m WHERE m.event_id = e.event_id)
  AND e.event_id NOT IN (SELECT k.event_id FROM statement_matches k
                         WHERE k.statement_id = %(statement)s AND k.event_id IS NOT NULL)
"""
# The statement's period and currencies, given to _OURS as values: estimates of a
# subquery on lines inserted a moment ago (no statistics yet) made the planner loop.
_SCOPE = """
SELECT s.period_start, s.period_end,
       (SELECT coalesce(array_agg(DISTINCT upper(currency)), '{}') FROM line_match)
FROM statements s WHERE s.statement_id = %(statement)s
"""

# Step 2: lines without a reference, paired with the nearest event in time where each is
# the other's nearest (ties by id): one event per line, one line per event.
_BY_AMOUNT = f"""
WITH pairs AS (
    SELECT m.line_no, o.event_id,
           row_number() OVER (PARTITION BY m.line_no ORDER BY
               abs(extract(epoch FROM o.received_at - m.created)), o.event_id) AS for_line,
           row_number() OVER (PARTITION BY o.event_id ORDER BY
               abs(extract(epoch FROM o.received_at - m.created)), m.line_no) AS for_event
    FROM line_match m
    JOIN ours o ON o.event_type = {_EVENT_TYPE} AND upper(o.asset) = upper(m.currency)
        AND abs(o.amount - abs(m.amount)) <= %(amount_tolerance)s
        AND o.received_at BETWEEN m.created - make_interval(secs => %(window)s)
                              AND m.created + make_interval(secs => %(window)s)
    WHERE m.reference IS NULL AND m.seen_in IS NULL
      AND m.type IN ('payment', 'refund', 'chargeback')
)
UPDATE line_match m
SET event_id = o.event_id, event_type = o.event_type, asset = o.asset,
    event_amount = o.amount
FROM pairs p JOIN ours o ON o.event_id = p.event_id
WHERE p.line_no = m.line_no AND p.for_line = 1 AND p.for_event = 1
"""

# Step 3 and the results. A payout's lines are every line of the statement naming it.
_PAYOUTS = """
CREATE TEMPORARY TABLE payouts ON COMMIT DROP AS
SELECT payout_id, coalesce(sum(net) FILTER (WHERE type <> 'payout'), 0) AS settled,
       sum(amount) FILTER (WHERE type = 'payout') AS paid
FROM statement_lines WHERE statement_id = %(statement)s AND payout_id IS NOT NULL
GROUP BY payout_id
"""

_RESULTS_TEMPLATE = """
WITH judged AS (
    SELECT m.*, p.settled, p.paid,
           CASE WHEN m.type = 'payment'
                THEN abs(m.amount) * %(fee_percent)s / 100 + %(fee_fixed)s
                WHEN m.type IN ('refund', 'chargeback') THEN 0 END AS expected_fee
    FROM line_match m LEFT JOIN payouts p
        ON p.payout_id = CASE WHEN m.type = 'payout' THEN m.payout_id END
)
INSERT INTO statement_matches (statement_id, line_no, event_id, result, expected_fee, detail)
SELECT %(statement)s, line_no, event_id, result, expected_fee, detail FROM (
    SELECT m.line_no, m.event_id, m.reference, m.expected_fee,
           CASE {result} END AS result, CASE {detail} END AS detail
    FROM judged m
) AS r
-- A line matched to the event its reference names needs no row: no row is that.
WHERE r.result <> 'matched' OR r.event_id IS DISTINCT FROM r.reference
"""

# The rules in order, the first that applies decides: (condition, result, detail).
_RULES = (
    ("m.seen_in IS NOT NULL", "duplicate",
     "format('line id %%s was imported in statement %%s', m.line_id, m.seen_in)"),
    ("m.first_line <> m.line_no", "duplicate",
     "format('reference %%s is named by line %%s already', m.reference, m.first_line)"),
    ("m.type = 'fee'", "matched", "''"),
    ("m.type = 'payout' AND abs(m.settled + m.paid) <= %(amount_tolerance)s", "matched", "''"),
    ("m.type = 'payout'", "amount_mismatch",
     "format('payout %%s pays %%s but its lines net %%s', m.payout_id,"
     " trim_scale(-m.amount), trim_scale(m.settled))"),
    ("m.event_id IS NULL AND m.reference IS NULL", "missing_in_books",
     "'no event of this type, currency and amount within the time window'"),
    ("m.event_id IS NULL", "missing_in_books",
     "format('no event %%s from this provider in the books', m.reference)"),
    (f"m.event_type <> {_EVENT_TYPE}", "amount_mismatch",
     "format('event %%s is a %%s in the books', m.event_id, m.event_type)"),
    ("upper(m.asset) <> upper(m.currency)", "amount_mismatch",
     "format('event %%s is in %%s in the books', m.event_id, m.asset)"),
    ("abs(m.event_amount - abs(m.amount)) > %(amount_tolerance)s", "amount_mismatch",
     "format('event %%s is %%s in the books', m.event_id, trim_scale(m.event_amount))"),
    ("abs(m.fee - m.expected_fee) > %(fee_tolerance)s", "fee_mismatch",
     "format('fee %%s where the contract says %%s', trim_scale(m.fee),"
     " trim_scale(m.expected_fee))"),
)
_RESULTS = _RESULTS_TEMPLATE.format(
    result=" ".join(f"WHEN {c} THEN '{r}'" for c, r, _ in _RULES) + " ELSE 'matched'",
    detail=" ".join(f"WHEN {c} THEN {d}" for c, _, d in _RULES) + " ELSE ''")

_MISSING_AT_PROVIDER = """
INSERT INTO statement_matches (statement_id, line_no, event_id, result, detail)
SELECT %(statement)s, NULL, o.event_id, 'missing_at_provider',
       format('%%s of %%s %%s received %%s, on no line', o.event_type,
              trim_scale(o.amount), o.asset, o.received_at)
FROM ours o
WHERE o.received_at BETWEEN %(start)s AND %(end)s
  AND NOT EXISTS (SELECT 1 FROM line_match m WHERE m.event_id = o.event_id)
"""


def match(cur: Cursor, statement_id: int, provider: str, settings: StatementSettings) -> None:
    """Match (again) the statement's lines that have no decided result, in the caller's
    transaction."""
    params: dict[str, Any] = {
        "statement": statement_id, "provider": provider,
        "window": settings.time_window_s, "amount_tolerance": settings.amount_tolerance,
        "fee_tolerance": settings.fee_tolerance, "fee_percent": settings.fee_percent,
        "fee_fixed": settings.fee_fixed}
    cur.execute("DELETE FROM statement_matches k WHERE k.statement_id = %(statement)s"
                " AND NOT EXISTS (SELECT 1 FROM statement_decisions d"
                " WHERE d.match_id = k.match_id)", params)
    cur.execute("SET LOCAL work_mem = %s", (WORK_MEM,))
    cur.execute(_TO_MATCH, params)
    cur.execute("ANALYZE match_lines")
    cur.execute(_LINES, params)
    cur.execute("ANALYZE line_match")
    cur.execute(_SCOPE, params)
    params["start"], params["end"], params["currencies"] = one_row(cur)
    for statement in (_OURS, "ANALYZE ours", _BY_AMOUNT, _PAYOUTS, "ANALYZE payouts",
                      _RESULTS, _MISSING_AT_PROVIDER):
        cur.execute(statement, params)
    cur.execute("DROP TABLE match_lines, line_match, ours, payouts")
