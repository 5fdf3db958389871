"""The ledger handler (group `ledger`): apply a batch of payment events exactly once.

All of it runs in the batch transaction the commit protocol opened:
  1. read each record into an event (a broken one becomes a dead letter) and drop
     repeats of an idempotency key inside the batch;
  2. dead-letter events of users that do not exist;
  3. claim the idempotency keys: one multi-row INSERT ... ON CONFLICT DO NOTHING
     RETURNING into processed_events (a concurrent claimer of the same key waits for
     our commit and then sees the conflict); unclaimed keys are duplicates, and so are
     claimed keys whose effect is already on record (the journal, or a final event
     status): housekeeping forgets old keys, a replay after that must stay a no-op;
  4. create the balance rows of first credits, then lock every touched balance row
     with SELECT ... FOR UPDATE in (user_id, asset) order (no deadlock between batches);
  5. plan in memory (ledger_plan.py): each user's events in offset order over the
     locked balances, so a withdrawal sees the deposit before it;
  6. one aggregated UPDATE of the balances, one INSERT of the journal rows
     (balance_events by COPY, UNIQUE (source_event_id, event_type) as the last line),
     the final outcome of rejected debits, a notification intent per rejection, and the
     event status through schema.status.transition.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import structlog

from consumers.dlq import DeadLetter
from consumers.failures import PoisonError
from consumers.handler import BatchResult
from consumers.ledger_plan import Candidate, Outcome, Pair, dedupe, plan_batch, read_event
from consumers.reconcile import HotPathReconciler
from consumers.records import Record
from schema.amounts import format_amount
from schema.events import NOTIFICATIONS_AGGREGATE
from schema.outbox import emit
from schema.status import EventStatus, transition

log = structlog.get_logger("consumers.ledger")

NOTIFICATION_WITHDRAWAL_REJECTED = "withdrawal_rejected"


class LedgerHandler:
    name = "ledger"

    def __init__(self, reconciler: HotPathReconciler | None = None) -> None:
        self.reconciler = reconciler if reconciler is not None else HotPathReconciler.from_env()

    def after_batch(self, connection: Callable[[], Any]) -> None:
        """Between batches: re-check recently touched balances against their journal."""
        self.reconciler.maybe_check(connection)

    def apply(self, cur: Any, records: Sequence[Record]) -> BatchResult:
        result = BatchResult()
        candidates: list[Candidate] = []
        for record in records:
            try:
                candidates.append(read_event(record))
            except PoisonError as exc:
                result.dead_letters.append(DeadLetter(record, exc.reason, exc.detail))
        unique, repeats = dedupe(candidates)
        result.outcomes["duplicate"] += len(repeats)
        known = _known_users(cur, {c.event.user_id for c in unique})
        valid = []
        for c in unique:
            if c.event.user_id in known:
                valid.append(c)
            else:
                result.dead_letters.append(DeadLetter(
                    c.record, "unknown_user", f"user {c.event.user_id!r} does not exist"))
        claimed = _claim(cur, valid)
        settled = _already_settled(cur, [c for c in valid if c.key in claimed])
        fresh = [c for c in valid if c.key in claimed and c.key not in settled]
        result.outcomes["duplicate"] += len(valid) - len(fresh)
        if not fresh:
            return result
        opening = _lock_balances(cur, fresh)
        plan = plan_batch(fresh, opening)
        self.reconciler.note_touched(plan.deltas.keys())
        _write_balances(cur, plan.sorted_deltas())
        applied = plan.with_outcome(Outcome.APPLIED)
        rejected = plan.with_outcome(Outcome.INSUFFICIENT_FUNDS)
        _write_journal(cur, applied)
        if rejected:
            _record_rejections(cur, rejected, plan.closing)
        transition(cur, sorted({c.event.event_id for c in applied}), EventStatus.APPLIED)
        transition(cur, sorted({c.event.event_id for c in rejected}), EventStatus.REJECTED)
        result.outcomes[Outcome.APPLIED.value] += len(applied)
        result.outcomes[Outcome.INSUFFICIENT_FUNDS.value] += len(rejected)
        return result


def _known_users(cur: Any, user_ids: set[str]) -> set[str]:
    if not user_ids:
        return set()
    cur.execute("SELECT user_id FROM users WHERE user_id = ANY(%s)", (sorted(user_ids),))
    return {row[0] for row in cur.fetchall()}


def _claim(cur: Any, candidates: Sequence[Candidate]) -> set[str]:
    """Insert the idempotency keys; return those this transaction claimed.

    The outcome is written as 'applied' and corrected for rejected debits in the same
    transaction (step 6), so nobody ever sees the provisional value. Keys go in sorted
    order so two batches sharing keys wait on each other instead of deadlocking.
    """
    if not candidates:
        return set()
    rows = sorted((c.key, c.event.event_id, c.event.event_type.value) for c in candidates)
    cur.execute(
        "INSERT INTO processed_events (idempotency_key, event_id, event_type, outcome)"
        " SELECT k, e, t, 'applied'"
        " FROM unnest(%s::text[], %s::text[], %s::text[]) AS x(k, e, t) ORDER BY k"
        " ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key",
        ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
    )
    return {row[0] for row in cur.fetchall()}


def _already_settled(cur: Any, claimed: Sequence[Candidate]) -> set[str]:
    """Keys claimed now whose event already had its effect (journal row, or status
    applied/rejected): their processed_events row was purged by housekeeping. The claim
    is kept, with the outcome the event had, and nothing is applied again; a rejection
    stays a rejection (a replay cannot turn it into a success)."""
    if not claimed:
        return set()
    rows = sorted((c.key, c.event.event_id, c.event.event_type.value) for c in claimed)
    cur.execute(
        "SELECT x.k, p.status = 'rejected' FROM unnest(%s::text[], %s::text[], %s::text[])"
        " AS x(k, e, t) LEFT JOIN payment_events p ON p.event_id = x.e"
        " WHERE p.status IN ('applied', 'rejected') OR EXISTS (SELECT 1 FROM balance_events b"
        "  WHERE b.source_event_id = x.e AND b.event_type = x.t)",
        ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]),
    )
    settled = dict(cur.fetchall())
    rejected = sorted(k for k, was_rejected in settled.items() if was_rejected)
    if rejected:
        cur.execute("UPDATE processed_events SET outcome = %s WHERE idempotency_key = ANY(%s)",
                    (Outcome.INSUFFICIENT_FUNDS.value, rejected))
    if settled:
        log.info("replay_after_ttl_ignored", events=len(settled))
    return set(settled)


def _lock_balances(cur: Any, fresh: Sequence[Candidate]) -> dict[Pair, Decimal]:
    """Create first-credit rows, lock every touched row in order; return the balances."""
    credit_pairs = sorted({c.pair for c in fresh if c.event.event_type.is_credit})
    if credit_pairs:
        cur.execute(
            "INSERT INTO balances (user_id, asset)"
            " SELECT u, a FROM unnest(%s::text[], %s::text[]) AS x(u, a) ORDER BY u, a"
            " ON CONFLICT (user_id, asset) DO NOTHING",
            ([p[0] for p in credit_pairs], [p[1] for p in credit_pairs]),
        )
    pairs = sorted({c.pair for c in fresh})
    cur.execute(
        "SELECT b.user_id, b.asset, b.balance FROM balances b"
        " JOIN unnest(%s::text[], %s::text[]) AS x(u, a) ON b.user_id = x.u AND b.asset = x.a"
        " ORDER BY b.user_id, b.asset FOR UPDATE OF b",
        ([p[0] for p in pairs], [p[1] for p in pairs]),
    )
    # A debit-only pair without a row has nothing to spend: it stays absent (zero).
    return {(u, a): balance for u, a, balance in cur.fetchall()}


def _write_balances(cur: Any, deltas: list[tuple[Pair, Decimal]]) -> None:
    if not deltas:
        return
    cur.execute(
        "UPDATE balances b SET balance = b.balance + d.delta, updated_at = now()"
        " FROM unnest(%s::text[], %s::text[], %s::numeric[]) AS d(u, a, delta)"
        " WHERE b.user_id = d.u AND b.asset = d.a",
        ([p[0] for p, _ in deltas], [p[1] for p, _ in deltas],
         [format_amount(d) if d > 0 else "-" + format_amount(-d) for _, d in deltas]),
    )


def _write_journal(cur: Any, applied: Sequence[Candidate]) -> None:
    """The journal rows, by COPY: ~40% cheaper per row than INSERT ... unnest here."""
    if not applied:
        return
    lines = "".join(
        f"{_copy_text(c.event.event_id)}\t{c.event.event_type.value}\t"
        f"{_copy_text(c.event.user_id)}\t{_copy_text(c.event.asset)}\t{_signed_text(c)}\n"
        for c in applied)
    cur.copy_expert("COPY balance_events (source_event_id, event_type, user_id, asset, delta)"
                    " FROM STDIN", io.StringIO(lines))


def _copy_text(value: str) -> str:
    # COPY's text format: backslash, tab, newline and carriage return must be escaped
    # (event ids may hold a backslash; the contract rules out the others, keep it total).
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return (value.replace("\\", "\\\\").replace("\t", "\\t")
                .replace("\n", "\\n").replace("\r", "\\r"))
    return value


def _signed_text(c: Candidate) -> str:
    text = format_amount(c.event.amount)
    return text if c.event.event_type.is_credit else "-" + text


def _record_rejections(cur: Any, rejected: Sequence[Candidate],
                       closing: dict[Pair, Decimal]) -> None:
    """Final outcome of each rejected debit, and one notification intent per event.

    Both happen only for keys this transaction claimed, so a redelivered rejection
    neither flips to a success nor notifies the user twice.
    """
    cur.execute(
        "UPDATE processed_events SET outcome = %s WHERE idempotency_key = ANY(%s)",
        (Outcome.INSUFFICIENT_FUNDS.value, sorted(c.key for c in rejected)),
    )
    for c in rejected:
        event = c.event
        trace_id = c.trace_id or event.event_id
        emit(cur, aggregatetype=NOTIFICATIONS_AGGREGATE, aggregateid=event.user_id,
             event_type=NOTIFICATION_WITHDRAWAL_REJECTED, event_id=event.event_id,
             payload={"kind": NOTIFICATION_WITHDRAWAL_REJECTED, "event_id": event.event_id,
                      "event_type": event.event_type.value, "user_id": event.user_id,
                      "asset": event.asset, "amount": format_amount(event.amount),
                      "reason": Outcome.INSUFFICIENT_FUNDS.value},
             trace_id=trace_id)
        log.info("withdrawal_rejected", trace_id=trace_id, event_id=event.event_id,
                 user_id=event.user_id, asset=event.asset,
                 amount=format_amount(event.amount),
                 balance_after_batch=format_amount(closing.get(c.pair, Decimal(0))))
