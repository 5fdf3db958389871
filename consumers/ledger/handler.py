"""The ledger handler (group `ledger`): apply a batch of payment events exactly once.

All of it runs in the batch transaction the commit protocol opened. `apply` does, in
this order (the steps are numbered at the call sites too):
  1. read each record into an event (a broken one becomes a dead letter);
  2. dead-letter what the outbox did not send: an event whose payment_events row is
     missing, holds another content hash, or has a status no redelivery explains
     (schema.stored_events.judge: only the outbox can credit, whatever else can produce
     to the topic); settlements that no chain deposit the watcher decided explains.
     Before anything is recorded, so a replayed dead letter is not mistaken for a
     duplicate, and every record, so an altered copy is judged even next to its genuine
     one; then drop repeats of an idempotency key inside the batch. Set aside the
     events of users that do not exist: what the outbox stored,
     judged from the books like an overdraft, so a final rejection (unknown_user) that
     step 6 claims with the others, not a dead letter (docs/guarantees.md);
  3. create the balance rows of first credits, then lock every touched balance row
     with SELECT ... FOR UPDATE in (user_id, asset) order (no deadlock between batches);
  4. find the events applied before whose outcome housekeeping forgot: their effect is
     on record (a transfer, a final or waiting status, their deposit already
     settled); they are never applied again, their outcome is written back as it was (a
     rejection stays a rejection). Since step 2 dead-letters a payment event that is
     past `received` without a recorded outcome (status_conflict), this now catches
     settlements (no payment_events row: their deposit's state tells) and a transfer
     without its status, a defence in depth;
  5. plan in memory (plan.py): each user's events in offset order over the
     locked balances, so a withdrawal sees the deposit before it;
  6. record each event's final outcome, once (schema.processed_events.record): the
     claim, filed under its event's day (the unknown users' rejections too: their
     status becomes `rejected`, and nothing else is written for them: no balance row,
     no money, no notification).
     Nothing is inserted as `applied` and corrected later. Events another transaction
     recorded first are duplicates: the claim keeps nothing of this batch then, and
     steps 5 and 6 run again without them;
  7. one transfer per event that moves money, its postings summing to zero
     (consumers/ledger/postings.py), by COPY (transfers UNIQUE (source_event_id,
     event_type) as the last line of defence), and one aggregated UPDATE of the
     balances rows that copy the users' accounts;
  8. the ledger's own consequences (holds, reversals, shortfalls, the statuses of the
     events applied or rejected, through schema.status.transition), then each declared
     consequence in its declared order (consequences.py: the chain deposits, the
     invoices the batch pays, ..., last the notification intents in one outbox round
     trip).

Why this order is safe when two appliers hold the same events (a rebalance can let two
processes hold one batch for a moment; a crash between the DB commit and the offset
commit redelivers it):
  - The claim decides: processed_events' key constraint lets one transaction only
    commit an outcome per event. A second applier's INSERT of the same key waits for the
    first transaction, then finds the key taken; its batch drops that event as a
    duplicate before anything else is written (money, transfers, notification, status all
    come after step 6).
  - Planning needs the balances as they are once the first applier is done: step 3
    locks every touched balance row, in order, before step 5 reads them, so the second
    applier waits there for the first one's commit (READ COMMITTED: the lock returns
    the row as committed). An event whose balance row does not exist yet (a debit of
    an asset the user never held) has nothing to lock: it is still claimed once.
  - transfers' UNIQUE constraint refuses a second effect whatever happens above.

Chain deposits and their settlements: settlements.py and chain_consequence.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import date
from decimal import Decimal

import structlog

from paystream.consumers.dead_letters.send import DeadLetter
from paystream.consumers.failures import PoisonError
from paystream.consumers.handler import BatchResult
from paystream.consumers.ledger import replays, settlements, shortfalls
from paystream.consumers.ledger.consequences import AppliedBatch, Consequence
from paystream.consumers.ledger.metrics import ShortfallGauge
from paystream.consumers.ledger.plan import (
    Candidate,
    Plan,
    References,
    dedupe,
    plan_batch,
    read_event,
)
from paystream.consumers.ledger.reconcile import HotPathReconciler
from paystream.consumers.ledger.settings import LedgerSettings
from paystream.consumers.records import Record
from paystream.schema import (
    accounts,
    holds,
    processed_events,
    reversals,
    stored_events,
    transfers,
)
from paystream.schema.amounts import format_amount
from paystream.schema.balances import BalanceKey
from paystream.schema.chain_deposits import HeldDeposit
from paystream.schema.db import Connection, Cursor, DbRole
from paystream.schema.events import EventType
from paystream.schema.pgarray import text_array
from paystream.schema.processed_events import Outcome
from paystream.schema.status import EventStatus, transition
from paystream.schema.transfers import sql_amount

log = structlog.get_logger("consumers.ledger")
ZERO = Decimal(0)



class LedgerHandler:
    """`consequences`: what other features write of each batch, in this order, in its
    transaction (consequences.py); `clock`: the moment a batch's notices are stamped
    with. paystream/consume.py `ledger_handler` builds the one the group runs."""

    name = "ledger"
    db_role: DbRole = "ledger"

    def __init__(self, settings: LedgerSettings, reconciler: HotPathReconciler,
                 consequences: Sequence[Consequence], clock: Callable[[], str]) -> None:
        self.reconciler = reconciler
        self.shortfalls = ShortfallGauge(reconciler.interval_s)
        self.hold_ttl_s = settings.hold_ttl_s
        self.consequences = tuple(consequences)
        self.clock = clock

    def after_batch(self, connection: Callable[[], Connection]) -> None:
        """Between batches: re-check recently touched balances against their journal,
        and refresh the open-shortfall gauge (operators resolve them elsewhere)."""
        self.reconciler.maybe_check(connection)
        self.shortfalls.maybe_refresh(connection)

    def apply(self, cur: Cursor, records: Sequence[Record]) -> BatchResult:
        result = BatchResult()
        # Step 1. Each record as an event.
        candidates: list[Candidate] = []
        for record in records:
            try:
                candidates.append(read_event(record))
            except PoisonError as exc:
                result.dead_letters.append(DeadLetter(record, exc.reason, exc.detail))
        # Step 2. Dead letters: records the outbox did not send, settlements no decided
        # deposit explains. Every record is judged before repeats of a key are dropped:
        # an altered copy next to its genuine one is a dead letter, whichever comes
        # first, and never hides the genuine one as its "duplicate".
        valid, statuses, days = _outbox_events_only(cur, candidates, result)
        deposits, problems = settlements.judge(cur, valid)
        days.update(_settlement_days(valid, deposits))
        valid, repeats = dedupe(_without_dead_letters(valid, problems, result))
        result.outcomes["duplicate"] += len(repeats)
        # Events of unknown users are set aside: rejected at step 6.
        valid, strangers = _known_users_only(cur, valid)
        if not valid and not strangers:
            return result
        to_claim = len(valid) + len(strangers)
        # Step 3. Lock every balance the batch touches, in order, then the holds its
        # closes name; read the originals its reversals name.
        opening = _lock_balances(cur, valid)
        references = _references(cur, valid)
        # Step 4. Events applied before whose outcome housekeeping forgot.
        forgotten = replays.effects_on_record(cur, valid, deposits, statuses)
        on_record = {c.key for c, _ in forgotten}
        fresh = [c for c in valid if c.key not in on_record]
        flagged = _flagged_users(cur, fresh)
        while True:
            # Step 5. Plan.
            plan = plan_batch(fresh, opening, flagged,
                              {d: held.network for d, held in deposits.items()}, references)
            # Step 6. Record each event's outcome, once: the claim. Events another
            # transaction recorded are duplicates: nothing was kept, plan without them.
            taken = processed_events.record(
                cur, _outcome_rows([*plan.decisions, *forgotten, *strangers], days))
            if not taken:
                break
            fresh = [c for c in fresh if c.key not in taken]
            forgotten = [(c, o) for c, o in forgotten if c.key not in taken]
            strangers = [(c, o) for c, o in strangers if c.key not in taken]
        if forgotten:
            log.info("replay_after_ttl_ignored", events=len(forgotten))
        result.outcomes["duplicate"] += to_claim - len(fresh) - len(strangers)
        _reject_unknown_users(cur, [c for c, _ in strangers], result)
        if not fresh:
            return result
        # Step 7. The money: the transfers, and the balances rows that copy them.
        self.reconciler.note_touched(plan.touched)
        _write_balances(cur, plan)
        _write_transfers(cur, plan)
        # Step 8. The ledger's own (holds, reversals, shortfalls, statuses), then each
        # feature's, in their order.
        _write_own_consequences(cur, plan, self.hold_ttl_s)
        applied = AppliedBatch(plan, self.clock())
        for consequence in self.consequences:
            consequence.write(cur, applied)
        result.outcomes.update(Counter(outcome.value for _, outcome in plan.decisions))
        return result


def _outbox_events_only(cur: Cursor, candidates: list[Candidate], result: BatchResult
                        ) -> tuple[list[Candidate], dict[str, str], dict[str, date]]:
    """Dead-letter (into `result`) the events that do not match their stored row. One
    query for the batch; settlements have no row (the watcher writes only the outbox):
    settlements.judge judges them against their deposit. Also returns the status of
    each event kept that the ledger processed before (a redelivery): step 4 needs it;
    and the day each stored row was received on, by key: its claim's (step 6)."""
    plain = [(c, c.event.content_hash()) for c in candidates if c.event.settles is None]
    suspect, days = stored_events.visible_suspects(
        cur, [(c.event.event_id, c.key, h) for c, h in plain])
    if not suspect:
        return candidates, {}, days
    bad: dict[int, tuple[str, str]] = {}
    statuses: dict[str, str] = {}
    for c, content_hash in plain:
        if c.key in suspect:
            row = suspect[c.key]
            problem = stored_events.judge(c.event.event_id, content_hash, row)
            if problem is not None:
                bad[id(c)] = problem
            elif row is not None and row.status in stored_events.PROCESSED_STATUSES:
                statuses[c.event.event_id] = row.status.value
    return _without_dead_letters(candidates, bad, result), statuses, days


def _settlement_days(candidates: list[Candidate], deposits: dict[str, HeldDeposit]
                     ) -> dict[str, date]:
    """A settlement's claim is filed under the day its deposit was recorded on."""
    if not deposits:  # most batches: no settlement, nothing to walk
        return {}
    return {c.key: held.day for c in candidates if c.event.settles is not None
            and (held := deposits.get(c.event.settles)) is not None and held.day is not None}


def _known_users_only(cur: Cursor, candidates: list[Candidate]
                      ) -> tuple[list[Candidate], list[tuple[Candidate, Outcome]]]:
    """The events of users that exist, and the others with their outcome (unknown_user).

    Only events with a stored row (checked against it at the previous step) are set
    aside: a settlement has none, and one naming an unknown user names no deposit of
    theirs either, so settlements.judge dead-letters it (unknown_deposit)."""
    user_ids = sorted({c.event.user_id for c in candidates})
    if not user_ids:
        return [], []
    cur.execute("SELECT user_id FROM users WHERE user_id = ANY(%s::text[])",
                (text_array(user_ids),))
    known = {row[0] for row in cur.fetchall()}
    valid: list[Candidate] = []
    strangers: list[tuple[Candidate, Outcome]] = []
    for c in candidates:
        if c.event.user_id in known or c.event.settles is not None:
            valid.append(c)
        else:
            strangers.append((c, Outcome.UNKNOWN_USER))
    return valid, strangers


def _reject_unknown_users(cur: Cursor, strangers: Sequence[Candidate],
                          result: BatchResult) -> None:
    """Step 8 for the events of unknown users this batch claimed: status `rejected`, a
    line each, counted. No balance row, no transfer, no notification (nobody to tell)."""
    if not strangers:
        return
    transition(cur, sorted({c.event.event_id for c in strangers}), EventStatus.REJECTED)
    for c in strangers:
        event = c.event
        log.info("event_rejected", trace_id=c.trace_id or event.event_id,
                 event_id=event.event_id, event_type=event.event_type.value,
                 user_id=event.user_id, provider=event.provider, asset=event.asset,
                 reason=Outcome.UNKNOWN_USER.value, amount=format_amount(event.amount))
    result.outcomes[Outcome.UNKNOWN_USER.value] += len(strangers)


def _lock_balances(cur: Cursor, candidates: Sequence[Candidate]) -> dict[BalanceKey, Decimal]:
    """Create first-credit rows, lock every touched row in order; return the balances."""
    credit_keys = sorted({c.pair for c in candidates if c.event.event_type.is_credit})
    if credit_keys:
        cur.execute(
            "INSERT INTO balances (user_id, asset)"
            " SELECT u, a FROM unnest(%s::text[], %s::text[]) AS x(u, a) ORDER BY u, a"
            " ON CONFLICT (user_id, asset) DO NOTHING",
            (text_array([k[0] for k in credit_keys]), text_array([k[1] for k in credit_keys])),
        )
    keys = sorted({c.pair for c in candidates})
    cur.execute(
        "SELECT b.user_id, b.asset, b.balance FROM balances b"
        " JOIN unnest(%s::text[], %s::text[]) AS x(u, a) ON b.user_id = x.u AND b.asset = x.a"
        " ORDER BY b.user_id, b.asset FOR UPDATE OF b",
        (text_array([k[0] for k in keys]), text_array([k[1] for k in keys])),
    )
    # A debit-only key without a row has nothing to spend: it stays absent (zero).
    return {(u, a): balance for u, a, balance in cur.fetchall()}


def _references(cur: Cursor, candidates: Sequence[Candidate]) -> References:
    """The holds the batch's closes name (locked, after the balances: one lock order for
    every batch) and the originals its reversals name."""
    closing = [c.event.reference for c in candidates
               if c.event.event_type.closes_hold and c.event.reference is not None]
    reversing = [c.event.reference for c in candidates
                 if c.event.event_type.is_reversal and c.event.reference is not None]
    return References(holds.lock(cur, closing), reversals.originals(cur, reversing))


def _flagged_users(cur: Cursor, fresh: Sequence[Candidate]) -> set[str]:
    """Users of the batch's debits with an open shortfall: their debits are refused."""
    debtors = sorted({c.event.user_id for c in fresh
                      if isinstance(c.event.event_type, EventType)
                      and not c.event.event_type.is_credit})
    if not debtors:
        return set()
    cur.execute("SELECT DISTINCT user_id FROM account_shortfalls"
                " WHERE resolved_at IS NULL AND user_id = ANY(%s)", (debtors,))
    return {row[0] for row in cur.fetchall()}


def _outcome_rows(outcomes: Iterable[tuple[Candidate, Outcome]], days: dict[str, date]
                  ) -> list[processed_events.OutcomeRow]:
    return [(c.key, c.event.event_id, c.event.event_type.value, o, days.get(c.key))
            for c, o in outcomes]


def _write_balances(cur: Cursor, plan: Plan) -> None:
    """Add the plan's net deltas to each touched balances row, one UPDATE for the three
    columns (the rows are locked, step 3)."""
    books = (plan.deltas, plan.pending_deltas, plan.held_deltas)
    pairs = sorted(p for p in plan.touched if any(book.get(p, ZERO) != ZERO for book in books))
    if not pairs:
        return
    available, pending, held = ([sql_amount(book.get(p, ZERO)) for p in pairs]
                                for book in books)
    cur.execute(
        "UPDATE balances b SET balance = b.balance + d.da, pending = b.pending + d.dp,"
        " held = b.held + d.dh, updated_at = now()"
        " FROM unnest(%s::text[], %s::text[], %s::numeric[], %s::numeric[], %s::numeric[])"
        " AS d(u, a, da, dp, dh) WHERE b.user_id = d.u AND b.asset = d.a",
        (text_array([p[0] for p in pairs]), text_array([p[1] for p in pairs]),
         "{" + ",".join(available) + "}", "{" + ",".join(pending) + "}",
         "{" + ",".join(held) + "}"))


def _write_transfers(cur: Cursor, plan: Plan) -> None:
    """One transfer per event that moved money, with its postings (schema/transfers.py);
    the accounts they name are created on first use."""
    if not plan.transfers:
        return
    ids = accounts.resolve(cur, plan.accounts)
    transfers.write(cur, [
        transfers.NewTransfer(c.event.event_id, c.event.event_type.value,
                              [(ids[ref], ref.asset, amount) for ref, amount in moved])
        for c, moved in plan.transfers])


def _write_own_consequences(cur: Cursor, plan: Plan, hold_ttl_s: float) -> None:
    """Step 8, the ledger's own: holds placed and closed, reversals, shortfalls of
    refunds, chargebacks, reverts and debit adjustments, the rejections' lines, the
    statuses of the events applied or rejected (a chain deposit's are chain_consequence's)."""
    holds.place(cur, plan.placed_holds, hold_ttl_s)
    holds.close(cur, plan.closed_holds)
    reversals.record(cur, plan.reversals)
    short = [c for c in plan.with_outcome(Outcome.SHORTFALL) if c.event.settles is None]
    if short:
        shortfalls.open_for_debits(cur, short, plan)
    rejected = [c for c, o in plan.decisions if o.is_rejection]
    _log_rejections(rejected, plan)
    applied = [c for c in plan.with_outcome(Outcome.APPLIED) if c.event.settles is None]
    transition(cur, sorted({c.event.event_id for c in (*applied, *short)}),
               EventStatus.APPLIED)
    transition(cur, sorted({c.event.event_id for c in rejected}), EventStatus.REJECTED)


def _log_rejections(rejected: Sequence[Candidate], plan: Plan) -> None:
    """A line per rejected debit (insufficient_funds, account_flagged, ...); the user is
    told by the notifications."""
    reasons = {id(c): o for c, o in plan.decisions}
    for c in rejected:
        event = c.event
        log.info("event_rejected", trace_id=c.trace_id or event.event_id,
                 event_id=event.event_id, event_type=event.event_type.value,
                 user_id=event.user_id, asset=event.asset, reason=reasons[id(c)].value,
                 amount=format_amount(event.amount),
                 balance_after_batch=format_amount(plan.closing.get(c.pair, Decimal(0))))


def _without_dead_letters(candidates: list[Candidate], bad: dict[int, tuple[str, str]],
                          result: BatchResult) -> list[Candidate]:
    """Dead-letter (into `result`) the candidates `bad` names by id(), with its (reason,
    detail); return the others, in order."""
    if not bad:
        return candidates
    for c in candidates:
        if id(c) in bad:
            reason, detail = bad[id(c)]
            result.dead_letters.append(DeadLetter(c.record, reason, detail,
                                                  provider=c.event.provider))
    return [c for c in candidates if id(c) not in bad]
