"""The operator's decisions on a statement's differences, each one a row of
statement_decisions (only inserted: the audit), in the caller's transaction.

  missing_in_books     the event the webhook should have been, written by the ingest's
                       own write (ingest/payments.py: parse_payment, then PaymentWrite:
                       its refusals, the event row and its outbox row), so the ledger
                       applies it like any delivery; a refusal is recorded as such
  fee_mismatch         a proposed adjustment of the payment's user by the difference
                       (the contract's fee minus the provider's), written as an operator
                       adjustment (consumers/ledger/operator_events.py) only once someone other than
                       the proposer approved it (the console, or `statements approve`)
  missing_at_provider  acknowledged, or with `revert` the event reverted
                       (consumers/ledger/operator_events.py revert)
  amount_mismatch,     acknowledged with the reason (a claim opened with the provider,
  duplicate            a payout corrected by hand): nothing is written to the books
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from paystream.consumers.ledger.operator_events import (
    OperatorEventError,
    adjust,
    derived_id,
    revert,
)
from paystream.ingest.errors import IngestError
from paystream.ingest.payments import (
    RESERVED_PREFIXES,
    STATEMENT_PREFIX,
    PaymentWrite,
    parse_payment,
)
from paystream.schema.db import Cursor, one_row

# A line type's event in the books (the ingest's gateway event types).
EVENT_TYPES = {"payment": "deposit", "refund": "refund", "chargeback": "chargeback"}
MAX_REASON = 1000


class DecisionError(ValueError):
    """A decision that cannot be taken (nothing to resolve, a missing user...); says why.
    Nothing was written."""


@dataclass(frozen=True)
class Decision:
    decision_id: int
    action: str
    state: str  # proposed | done | refused
    event_id: str | None
    amount: Decimal | None
    detail: str = ""


@dataclass(frozen=True)
class Difference:
    """One match row with its line (None for missing_at_provider) and its last decision."""

    match_id: int
    statement_id: int
    provider: str
    result: str
    event_id: str | None
    expected_fee: Decimal | None
    line: dict[str, Any] | None
    last_state: str | None


_FIND = """
SELECT k.match_id, k.statement_id, s.provider, k.result, k.event_id, k.expected_fee,
       CASE WHEN l.line_no IS NULL THEN NULL ELSE to_jsonb(l) END,
       (SELECT d.state FROM statement_decisions d WHERE d.match_id = k.match_id
        ORDER BY d.decision_id DESC LIMIT 1)
FROM statement_matches k
JOIN statements s ON s.statement_id = k.statement_id
LEFT JOIN statement_lines l ON l.statement_id = k.statement_id AND l.line_no = k.line_no
WHERE k.statement_id = %(statement)s
  AND (l.line_id = %(target)s OR (k.line_no IS NULL AND k.event_id = %(target)s))
ORDER BY k.line_no NULLS LAST LIMIT 1
"""


def find(cur: Cursor, statement_id: int, target: str) -> Difference:
    """The difference a line id (or, missing at the provider, an event id) names."""
    cur.execute(_FIND, {"statement": statement_id, "target": target})
    row = cur.fetchone()
    if row is None:
        cur.execute("SELECT 1 FROM statement_lines WHERE statement_id = %s AND line_id = %s",
                    (statement_id, target))
        if cur.fetchone() is not None:  # no row: matched to the event its reference names
            raise DecisionError(f"{target} matched: nothing to resolve")
        raise DecisionError(f"statement {statement_id} has no line {target!r} (nor an event"
                            " of ours missing at the provider by that id)")
    return Difference(*row)


def resolve(cur: Cursor, statement_id: int, target: str, *, reason: str, actor: str,
            user_id: str | None = None, reverses: str | None = None,
            revert_event: bool = False) -> Decision:
    """Act on one difference (the module's table); DecisionError when there is nothing
    to do or it is not this action's to take."""
    reason = _reason(reason)
    _lock(cur, find(cur, statement_id, target).match_id)
    diff = find(cur, statement_id, target)  # read again under the lock
    if diff.result == "matched":
        raise DecisionError(f"{target} matched: nothing to resolve")
    if diff.last_state == "done":
        raise DecisionError(f"{target} is resolved already")
    if diff.last_state == "proposed":
        raise DecisionError(f"{target} has an adjustment awaiting approval")
    if diff.result == "missing_in_books":
        return _record_event(cur, diff, reason, actor, user_id, reverses)
    if diff.result == "fee_mismatch":
        return _propose_fee(cur, diff, reason, actor)
    if diff.result == "missing_at_provider" and revert_event:
        assert diff.event_id is not None  # every missing_at_provider row names its event
        try:
            written = revert(cur, diff.event_id, reason)
        except OperatorEventError as exc:
            raise DecisionError(str(exc)) from None
        return _decide(cur, diff, "revert_event", "done", actor, reason,
                       written.event.event_id, written.event.amount)
    return _decide(cur, diff, "acknowledge", "done", actor, reason, None, None)


def approve(cur: Cursor, decision_id: int, *, actor: str, reason: str,
            statement_id: int | None = None) -> Decision:
    """Approve a proposed fee adjustment (of `statement_id`'s, if given): the adjustment
    is written (an operator event through the outbox) and the decision recorded done."""
    reason = _reason(reason)
    cur.execute("SELECT match_id FROM statement_decisions WHERE decision_id = %s",
                (decision_id,))
    found = cur.fetchone()
    if found is not None:  # two approvals of one proposal: the second waits, then sees it
        _lock(cur, found[0])
    cur.execute("SELECT d.match_id, d.action, d.state, d.actor, d.amount, k.statement_id,"
                " (SELECT max(n.decision_id) FROM statement_decisions n"
                "  WHERE n.match_id = d.match_id)"
                " FROM statement_decisions d JOIN statement_matches k USING (match_id)"
                " WHERE d.decision_id = %s", (decision_id,))
    row = cur.fetchone()
    if (row is None or row[1] != "adjust_fee" or row[2] != "proposed" or row[6] != decision_id
            or statement_id not in (None, row[5])):
        raise DecisionError(f"decision {decision_id} is no fee adjustment awaiting approval")
    match_id, _, _, proposer, amount, statement_id, _ = row
    if proposer == actor:
        raise DecisionError(f"{actor} proposed decision {decision_id}: another person approves")
    cur.execute("SELECT l.line_id, e.user_id, e.asset FROM statement_matches k"
                " JOIN statement_lines l USING (statement_id, line_no)"
                " JOIN payment_events e ON e.event_id = k.event_id WHERE k.match_id = %s",
                (match_id,))
    line_id, user_id, asset = one_row(cur)
    try:
        written = adjust(cur, user_id=user_id, asset=asset, amount=amount,
                         reason=f"statement {statement_id} line {line_id} fee: {reason}",
                         idempotency_key=f"statement-fee:{statement_id}:{line_id}")
    except OperatorEventError as exc:
        raise DecisionError(str(exc)) from None
    cur.execute("INSERT INTO statement_decisions (match_id, action, state, actor, reason,"
                " event_id, amount) VALUES (%s, 'adjust_fee', 'done', %s, %s, %s, %s)"
                " RETURNING decision_id", (match_id, actor, reason, written.event.event_id,
                                           amount))
    return Decision(one_row(cur)[0], "adjust_fee", "done", written.event.event_id, amount)


def _record_event(cur: Cursor, diff: Difference, reason: str, actor: str,
                  user_id: str | None, reverses: str | None) -> Decision:
    line = diff.line
    if line is None or line["type"] not in EVENT_TYPES:
        raise DecisionError("only a payment, refund or chargeback line becomes an event")
    extra = line.get("extra") or {}
    body: dict[str, Any] = {
        "event_id": line["reference"] or derived_id(STATEMENT_PREFIX.rstrip(":"), diff.provider,
                                                      line["line_id"]),
        "event_type": EVENT_TYPES[line["type"]],
        "user_id": user_id or extra.get("user_id") or _user_of(cur, reverses),
        "amount": _text(abs(Decimal(str(line["amount"])))), "asset": line["currency"]}
    if line["type"] != "payment":
        body["reverses"] = reverses or extra.get("reverses")
        if not body["user_id"]:
            body["user_id"] = _user_of(cur, body["reverses"])
    if not body["user_id"]:
        raise DecisionError("whose money is it? give --user (the line has no user_id column)")
    try:
        event = parse_payment(body, default_asset=line["currency"], reserved=tuple(
            p for p in RESERVED_PREFIXES if p != STATEMENT_PREFIX))
        recorded = PaymentWrite(event, uuid.uuid4().hex).write(cur)
    except IngestError as exc:
        raise DecisionError(f"the ingest refuses the event: {exc.detail}") from None
    if recorded.refused is not None:
        return _decide(cur, diff, "record_event", "refused", actor, reason, event.event_id,
                       event.amount, detail=recorded.refused.detail)
    return _decide(cur, diff, "record_event", "done", actor, reason, event.event_id,
                   event.amount)


def _propose_fee(cur: Cursor, diff: Difference, reason: str, actor: str) -> Decision:
    assert diff.line is not None and diff.expected_fee is not None
    difference = diff.expected_fee - Decimal(str(diff.line["fee"]))
    return _decide(cur, diff, "adjust_fee", "proposed", actor, reason, None, difference)


def _decide(cur: Cursor, diff: Difference, action: str, state: str, actor: str, reason: str,
            event_id: str | None, amount: Decimal | None, detail: str = "") -> Decision:
    cur.execute("INSERT INTO statement_decisions (match_id, action, state, actor, reason,"
                " event_id, amount) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " RETURNING decision_id",
                (diff.match_id, action, state, actor[:200], reason, event_id, amount))
    return Decision(one_row(cur)[0], action, state, event_id, amount, detail)


def _lock(cur: Cursor, match_id: int) -> None:
    """One decision on a difference at a time (two operators resolving one line: the
    second waits for the first's commit, then sees its decision)."""
    cur.execute("SELECT pg_advisory_xact_lock(hashtextextended('statement-match:' || %s, 0))",
                (match_id,))


def _user_of(cur: Cursor, event_id: str | None) -> str | None:
    if not event_id:
        return None
    cur.execute("SELECT user_id FROM payment_events WHERE event_id = %s", (event_id,))
    row = cur.fetchone()
    return None if row is None else str(row[0])


def _reason(reason: str) -> str:
    reason = reason.strip()
    if not 1 <= len(reason) <= MAX_REASON:
        raise DecisionError(f"a reason of 1 to {MAX_REASON} characters is required")
    return reason


def _text(amount: Decimal) -> str:
    """An amount as the gateway's wire writes it (no exponent, no trailing zeros)."""
    text = format(amount, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text
