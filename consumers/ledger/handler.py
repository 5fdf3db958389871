"""The ledger handler (group `ledger`): apply a batch of payment events exactly once.

All of it runs in the batch transaction the commit protocol opened. `apply` does, in
this order (the steps are numbered at the call sites too):
  1. read each record into an event (a broken one becomes a dead letter) and drop
     repeats of an idempotency key inside the batch;
  2. dead-letter what the outbox did not send: an event whose payment_events row is
     missing, holds another content hash, or has a status no redelivery explains
     (schema.stored_events.judge: only the outbox can credit, whatever else can produce
     to the topic); settlements that no chain deposit the watcher decided explains.
     Before anything is recorded, so a replayed dead letter is not mistaken for a
     duplicate. Set aside the events of users that do not exist: what the outbox stored,
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
  5. plan in memory (ledger_plan.py): each user's events in offset order over the
     locked balances, so a withdrawal sees the deposit before it;
  6. record each event's final outcome, once (schema.processed_events.record): the
     claim (the unknown users' rejections too: their status becomes `rejected`, and
     nothing else is written for them: no balance row, no money, no notification).
     Nothing is inserted as `applied` and corrected later. Events another transaction
     recorded first are duplicates: the claim keeps nothing of this batch then, and
     steps 5 and 6 run again without them;
  7. one transfer per event that moves money, its postings summing to zero
     (consumers/ledger/postings.py), by COPY (transfers UNIQUE (source_event_id,
     event_type) as the last line of defence), and one aggregated UPDATE of the
     balances rows that copy the users' accounts;
  8. the chain deposits, the waiting outcomes a settlement decides, the event
     statuses through schema.status.transition, the invoices the batch's deposits pay
     (invoices/matching.py), and a notification intent per user-visible change
     (notify/intents.py, the invoices' among them), all in one outbox round trip.

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

Chain deposits (docs/finality.md; see ledger_plan.py's table): a deposit carrying `chain` is held
in the user's pending account (balances.pending) and recorded in chain_deposits for the
finality watcher, status pending_finality. The watcher's settlement events
(deposit_finalized / deposit_reorged, same partition, after the deposit) move it to
available or release it, set chain_deposits.state final / reorged and the deposit's
status applied / reorged, all in the same batch transaction. The deposit's own outcome
is waiting (pending_finality: housekeeping keeps it) until a settlement moves it to
applied / reorged / reversed. A settlement naming no held deposit, or one that
contradicts the deposit (other user, asset, amount, or the opposite verdict already
applied) is a dead letter.

Credit before finality (a network with a credit depth): deposit_credited moves pending
to available (state credited, status credited, its own outcome `credited`, waiting until
the deposit settles); deposit_finalized with chain.credited moves no money (state final,
status applied); deposit_reversed debits available by the amount, never below zero:
what it cannot take is an account_shortfalls row, the user is flagged (every later debit
refused, outcome account_flagged), a critical log line, the shortfall metrics and a
notification intent, all in the batch transaction (state reversed, status reversed).
The transfers record exactly what moved, so reconcile holds. A reversal of a deposit that
was never credited is a dead letter (deposit_not_credited): the watcher only reverses
what the ledger credited, so it means a bug or a forged event, for review.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal

import structlog

from paystream.consumers.dlq import DeadLetter
from paystream.consumers.failures import PoisonError
from paystream.consumers.handler import BatchResult
from paystream.consumers.ledger.metrics import ShortfallGauge, count_reversal
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
from paystream.invoices import matching
from paystream.notify import intents
from paystream.schema import (
    accounts,
    chain_deposits,
    holds,
    processed_events,
    reversals,
    stored_events,
    transfers,
)
from paystream.schema.amounts import format_amount
from paystream.schema.balances import BalanceKey
from paystream.schema.chain_deposits import DepositState, HeldDeposit
from paystream.schema.db import Connection, Cursor, DbRole
from paystream.schema.events import (
    NOTIFICATIONS_AGGREGATE,
    EventType,
    PaymentEvent,
    SettlementType,
)
from paystream.schema.idempotency import idempotency_key
from paystream.schema.outbox import publish
from paystream.schema.pgarray import text_array
from paystream.schema.processed_events import Outcome
from paystream.schema.status import EventStatus, transition
from paystream.schema.stored_events import STATUS_CONFLICT
from paystream.schema.transfers import sql_amount

log = structlog.get_logger("consumers.ledger")
ZERO = Decimal(0)

# Debezium streams a transaction once its commit record is flushed to the WAL, and
# Postgres makes the transaction visible to other sessions a moment after that flush.
# A writer descheduled in between lets its record reach the ledger first: seen at load
# average 5 on 2 cores, an honest deposit was judged 60 ms after its 200 while its row
# was not yet visible (dead-lettered unknown_event). So a refusal that rests on a row
# not being there (or not yet in its new state) is looked up again after these pauses,
# ~2 s in all, before the record is dead-lettered; under READ COMMITTED each new
# statement sees what has committed since. Only records that fail the check pay.
VISIBILITY_RECHECKS_S = (0.02, 0.1, 0.3, 0.6, 1.0)


class LedgerHandler:
    name = "ledger"
    db_role: DbRole = "ledger"

    def __init__(self, reconciler: HotPathReconciler | None = None) -> None:
        self.reconciler = reconciler if reconciler is not None else HotPathReconciler.from_env()
        self.shortfalls = ShortfallGauge(self.reconciler.interval_s)
        self.hold_ttl_s = LedgerSettings.from_env().hold_ttl_s

    def after_batch(self, connection: Callable[[], Connection]) -> None:
        """Between batches: re-check recently touched balances against their journal,
        and refresh the open-shortfall gauge (operators resolve them elsewhere)."""
        self.reconciler.maybe_check(connection)
        self.shortfalls.maybe_refresh(connection)

    def apply(self, cur: Cursor, records: Sequence[Record]) -> BatchResult:
        result = BatchResult()
        # Step 1. Each record as an event; repeats of a key inside the batch.
        candidates: list[Candidate] = []
        for record in records:
            try:
                candidates.append(read_event(record))
            except PoisonError as exc:
                result.dead_letters.append(DeadLetter(record, exc.reason, exc.detail))
        unique, repeats = dedupe(candidates)
        result.outcomes["duplicate"] += len(repeats)
        # Step 2. Dead letters: records the outbox did not send, settlements no decided
        # deposit explains. Events of unknown users are set aside: rejected at step 6.
        valid, statuses = _outbox_events_only(cur, unique, result)
        valid, strangers = _known_users_only(cur, valid)
        deposits, problems = _settlements_judged(cur, valid)
        valid = _without_dead_letters(valid, problems, result)
        if not valid and not strangers:
            return result
        to_claim = len(valid) + len(strangers)
        # Step 3. Lock every balance the batch touches, in order, then the holds its
        # closes name; read the originals its reversals name.
        opening = _lock_balances(cur, valid)
        references = _references(cur, valid)
        # Step 4. Events applied before whose outcome housekeeping forgot.
        forgotten = _effects_on_record(cur, valid, deposits, statuses)
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
                cur, _outcome_rows([*plan.decisions, *forgotten, *strangers]))
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
        # Step 8. Chain deposits, holds, reversals, waiting outcomes, notifications,
        # statuses.
        _write_consequences(cur, plan, self.hold_ttl_s)
        result.outcomes.update(Counter(outcome.value for _, outcome in plan.decisions))
        return result


def _outbox_events_only(cur: Cursor, candidates: list[Candidate], result: BatchResult
                        ) -> tuple[list[Candidate], dict[str, str]]:
    """Dead-letter (into `result`) the events that do not match their stored row. One
    query for the batch; settlements have no row (the watcher writes only the outbox):
    _settlements_judged judges them against their deposit. Also returns the status of
    each event kept that the ledger processed before (a redelivery): step 4 needs it."""
    plain = [(c, c.event.content_hash()) for c in candidates if c.event.settles is None]
    suspect = _stored_suspects(cur, [(c.event.event_id, c.key, h) for c, h in plain])
    if not suspect:
        return candidates, {}
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
    return _without_dead_letters(candidates, bad, result), statuses


def _known_users_only(cur: Cursor, candidates: list[Candidate]
                      ) -> tuple[list[Candidate], list[tuple[Candidate, Outcome]]]:
    """The events of users that exist, and the others with their outcome (unknown_user).

    Only events with a stored row (checked against it at the previous step) are set
    aside: a settlement has none, and one naming an unknown user names no deposit of
    theirs either, so _settlements_judged dead-letters it (unknown_deposit)."""
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


def _stored_suspects(cur: Cursor, wanted: list[tuple[str, str, str]]
                     ) -> dict[str, stored_events.StoredEvent | None]:
    """stored_events.suspects, with the rows not yet visible looked up again (see
    VISIBILITY_RECHECKS_S) before they are judged missing."""
    suspect = stored_events.suspects(cur, wanted)
    for pause in VISIBILITY_RECHECKS_S:
        missing = [w for w in wanted if w[1] in suspect and suspect[w[1]] is None]
        if not missing:
            break
        time.sleep(pause)
        again = stored_events.suspects(cur, missing)
        for _event_id, key, _hash in missing:
            if key in again:
                suspect[key] = again[key]
            else:  # visible now, and as the record says
                del suspect[key]
    return suspect


def _settlements_judged(cur: Cursor, candidates: list[Candidate]
                        ) -> tuple[dict[str, HeldDeposit], dict[int, tuple[str, str]]]:
    """The held deposits the batch's settlements name, and the settlements no deposit
    explains (by id(), with their reason). A refusal that rests on the deposit's row
    (missing, or not yet in the state the watcher decided) is judged again after the
    pauses of VISIBILITY_RECHECKS_S; an id not derived from its deposit's is not."""
    settling = [c for c in candidates if c.event.settles is not None]
    if not settling:
        return {}, {}
    deposits = chain_deposits.held(cur, (str(c.event.settles) for c in settling))
    problems = _settlement_problems(settling, deposits)
    for pause in VISIBILITY_RECHECKS_S:
        if all(reason == stored_events.UNKNOWN_EVENT for reason, _ in problems.values()):
            break
        time.sleep(pause)
        deposits.update(chain_deposits.held(
            cur, (str(c.event.settles) for c in settling if id(c) in problems)))
        problems = _settlement_problems(settling, deposits)
    return deposits, problems


def _settlement_problems(candidates: list[Candidate], deposits: dict[str, HeldDeposit]
                         ) -> dict[int, tuple[str, str]]:
    """The settlement events no held chain deposit explains, by id(), with their
    (reason, detail)."""
    bad: dict[int, tuple[str, str]] = {}
    for c in candidates:
        event = c.event
        if event.settles is None:
            continue
        deposit = deposits.get(event.settles)
        if event.event_id != f"{event.settles}:{_SETTLEMENT_SUFFIX[event.event_type]}":
            # The watcher derives a settlement's id from its deposit's: one verdict, one id.
            bad[id(c)] = (stored_events.UNKNOWN_EVENT, f"{event.event_id!r} is not the id of a"
                          f" {event.event_type} of deposit {event.settles!r}")
        elif deposit is None:
            bad[id(c)] = ("unknown_deposit", f"no chain deposit {event.settles!r} is held")
        elif (deposit.user_id, deposit.asset, deposit.amount) != (
                event.user_id, event.asset, event.amount):
            bad[id(c)] = ("deposit_mismatch", f"{event.event_id} does not match deposit "
                          f"{event.settles!r} (user, asset or amount)")
        else:
            problem = settlement_conflict(event, deposit.state, deposit.credited)
            if problem is not None:
                bad[id(c)] = (problem, f"{event.event_id}: deposit {event.settles!r} is "
                              f"{deposit.state}{' (credited)' if deposit.credited else ''}")
    return bad


def settlement_conflict(event: PaymentEvent, state: str, credited: bool) -> str | None:
    """Why a settlement contradicts its deposit's state (None: it does not). Replays of
    a settlement already applied must pass (idempotency turns them into duplicates), so
    only the states it can never legitimately meet are refused, and a deposit the
    watcher has not decided this way (status_conflict). `credited`: the ledger
    credited the deposit before finality (chain_deposits.credited_at)."""
    kind = event.event_type
    if kind is SettlementType.DEPOSIT_REVERSED:
        # Only a credited deposit can be reversed; reorged before any credit is
        # deposit_reorged's job, and a final deposit is final.
        if not credited:
            return "deposit_not_credited"
        if state in ("final", "finalizing"):
            return "deposit_already_settled"
    elif kind is SettlementType.DEPOSIT_CREDITED:
        if state in ("pending", "suspect", "reorging", "reorged"):
            return "deposit_not_crediting"
        return None if credited or state == "crediting" else "deposit_already_settled"
    elif kind is SettlementType.DEPOSIT_FINALIZED:
        if event.settles_credited != credited:  # never credit twice, never forget one
            return "deposit_credit_mismatch"
        if state in ("reorged", "reversed", "reversing"):
            return "deposit_already_settled"
    elif kind is SettlementType.DEPOSIT_REORGED:
        if credited:  # credited money is only ever taken back by a reversal
            return "deposit_already_credited"
        if state == "final":
            return "deposit_already_settled"
    # Only the watcher's decision explains a settlement: it moves the deposit to the
    # decided state in the transaction that writes the event to the outbox, so a record
    # finding its deposit anywhere else (pending, say) was not sent by the outbox.
    decided = _DECIDED_STATES.get(kind)
    if decided is not None and state not in decided:
        return STATUS_CONFLICT
    return None


_SETTLEMENT_SUFFIX: dict[EventType | SettlementType, str] = {
    SettlementType.DEPOSIT_FINALIZED: "finalized", SettlementType.DEPOSIT_REORGED: "reorged",
    SettlementType.DEPOSIT_CREDITED: "credited", SettlementType.DEPOSIT_REVERSED: "reversed"}

# The deposit states in which a settlement can be on the topic: the watcher's decision,
# or (a redelivery) the state the ledger moved the deposit to when it applied it.
_DECIDED_STATES: dict[EventType | SettlementType, tuple[str, ...]] = {
    SettlementType.DEPOSIT_FINALIZED: ("finalizing", "final"),
    SettlementType.DEPOSIT_REORGED: ("reorging", "reorged"),
    SettlementType.DEPOSIT_REVERSED: ("reversing", "reversed"),
}


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


def _effects_on_record(cur: Cursor, candidates: Sequence[Candidate],
                       deposits: dict[str, HeldDeposit], statuses: dict[str, str]
                       ) -> list[tuple[Candidate, Outcome]]:
    """Events whose effect is on record (a transfer, a final or waiting status, or -
    for a settlement - its deposit already in the state it leads to), each with the
    outcome it had: applied before. If housekeeping purged their outcome row it is
    written back (the claim skips those whose row still exists); nothing is applied
    again, and a rejection stays a rejection (a replay cannot turn it into a success).
    `statuses`: the processed status of the batch's events that have one, as step 2
    read it (a status another applier commits after that read is caught by the claim:
    its outcome row commits with it)."""
    if not candidates:
        return []
    # An event with a stored row gets its status in the transaction that writes its
    # transfer, so its status says it all. Settlements have no row: their transfers are
    # looked up too (with their deposit's state, below).
    settling = sorted({c.event.event_id for c in candidates if c.event.settles is not None})
    moved: set[tuple[str, str]] = set()
    if settling:
        cur.execute("SELECT source_event_id, event_type FROM transfers"
                    " WHERE source_event_id = ANY(%s::text[])", (text_array(settling),))
        moved = set(cur.fetchall())
    on_record: dict[str, str | None] = {
        c.key: statuses.get(c.event.event_id) for c in candidates
        if c.event.event_id in statuses
        or (c.event.event_id, c.event.event_type.value) in moved}
    on_record.update(_settlements_on_record(cur, candidates, deposits))
    if not on_record:
        return []
    found = []
    for c in candidates:
        if c.key in on_record:
            found.append((c, _outcome_it_had(c.event, on_record[c.key])))
    return found


def _outcome_it_had(event: PaymentEvent, status: str | None) -> Outcome:
    """The outcome of an event already applied, from its status (a chain deposit's
    follows its status: pending_finality, then applied / reorged / reversed once
    settled) or from its settlement's deposit (_settlements_on_record)."""
    if event.is_chain_deposit:
        return {"applied": Outcome.APPLIED, "reorged": Outcome.REORGED,
                "reversed": Outcome.REVERSED}.get(status or "", Outcome.PENDING_FINALITY)
    if event.event_type is SettlementType.DEPOSIT_REORGED:
        return Outcome.REORGED
    if isinstance(event.event_type, SettlementType) and status is not None:
        return Outcome(status)
    if status == "rejected":
        return Outcome.INSUFFICIENT_FUNDS
    return Outcome.APPLIED


def _settlements_on_record(cur: Cursor, candidates: Sequence[Candidate],
                           deposits: dict[str, HeldDeposit]) -> dict[str, str]:
    """Settlement keys whose deposit is already where the settlement takes it (a
    finalisation of a credited deposit and a reversal that took nothing leave no
    transfer, so the transfers alone cannot tell). Value: the outcome it had."""
    settling = [c for c in candidates if c.event.settles is not None]
    if not settling:
        return {}
    cur.execute("SELECT source_event_id FROM account_shortfalls WHERE source_event_id = ANY(%s)",
                (sorted(c.event.event_id for c in settling),))
    short = {row[0] for row in cur.fetchall()}
    found: dict[str, str] = {}
    for c in settling:
        deposit = deposits.get(str(c.event.settles))
        state = deposit.state if deposit is not None else None
        was_credited = deposit is not None and deposit.credited
        kind = c.event.event_type
        if kind is SettlementType.DEPOSIT_FINALIZED and state == "final":
            found[c.key] = Outcome.APPLIED.value
        elif kind is SettlementType.DEPOSIT_REORGED and state == "reorged":
            found[c.key] = Outcome.REORGED.value
        elif kind is SettlementType.DEPOSIT_CREDITED and was_credited:
            found[c.key] = (Outcome.CREDITED if state in ("credited", "finalizing", "reversing")
                            else Outcome.APPLIED).value
        elif kind is SettlementType.DEPOSIT_REVERSED and state == "reversed":
            found[c.key] = (Outcome.SHORTFALL if c.event.event_id in short
                            else Outcome.APPLIED).value
    return found


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


def _outcome_rows(outcomes: Iterable[tuple[Candidate, Outcome]]
                  ) -> list[processed_events.OutcomeRow]:
    return [(c.key, c.event.event_id, c.event.event_type.value, o) for c, o in outcomes]


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


def _write_consequences(cur: Cursor, plan: Plan, hold_ttl_s: float) -> None:
    """Step 8: chain deposits, holds, reversals, waiting outcomes, notifications,
    statuses."""
    def of_type(candidates: Sequence[Candidate], kind: SettlementType) -> list[Candidate]:
        return [c for c in candidates if c.event.event_type is kind]

    applied = plan.with_outcome(Outcome.APPLIED)
    rejected = [c for c, o in plan.decisions if o.is_rejection]
    holds.place(cur, plan.placed_holds, hold_ttl_s)
    holds.close(cur, plan.closed_holds)
    reversals.record(cur, plan.reversals)
    short = [c for c in plan.with_outcome(Outcome.SHORTFALL) if c.event.settles is None]
    if short:
        _record_shortfalls(cur, short, plan)
        transition(cur, sorted({c.event.event_id for c in short}), EventStatus.APPLIED)
    pending = plan.with_outcome(Outcome.PENDING_FINALITY)
    reorged = plan.with_outcome(Outcome.REORGED)
    credited = plan.with_outcome(Outcome.CREDITED)
    chain_reversals = (of_type(applied, SettlementType.DEPOSIT_REVERSED)
                       + [c for c in plan.with_outcome(Outcome.SHORTFALL)
                          if c.event.settles is not None])
    finalized = of_type(applied, SettlementType.DEPOSIT_FINALIZED)
    _log_rejections(rejected, plan)
    chain_deposits.hold(cur, [(c.event, c.trace_id or c.event.event_id) for c in pending])
    _settle_deposits(cur, finalized, DepositState.FINAL, Outcome.APPLIED)
    _settle_deposits(cur, reorged, DepositState.REORGED, Outcome.REORGED)
    chain_deposits.credit(cur, (str(c.event.settles) for c in credited))
    if chain_reversals:
        _settle_deposits(cur, chain_reversals, DepositState.REVERSED, Outcome.REVERSED)
        _record_reversals(cur, chain_reversals, plan)
    plain = [c for c in applied if c.event.settles is None]
    transition(cur, sorted({c.event.event_id for c in plain}), EventStatus.APPLIED)
    transition(cur, sorted({c.event.event_id for c in rejected}), EventStatus.REJECTED)
    transition(cur, sorted({c.event.event_id for c in pending}),
               EventStatus.PENDING_FINALITY)
    transition(cur, _deposits_of(finalized), EventStatus.APPLIED)
    transition(cur, _deposits_of(reorged), EventStatus.REORGED)
    transition(cur, _deposits_of(credited), EventStatus.CREDITED)
    transition(cur, _deposits_of(chain_reversals), EventStatus.REVERSED)
    _notify(cur, plan)


def _deposits_of(settlements: Iterable[Candidate]) -> list[str]:
    return sorted({str(c.event.settles) for c in settlements})


def _settle_deposits(cur: Cursor, settling: Sequence[Candidate], state: DepositState,
                     outcome: Outcome) -> None:
    """Each settlement's deposit to `state` (final, reorged or reversed), the deposit's
    own waiting outcome (pending_finality) to `outcome`, and its deposit_credited's
    (credited) to applied: final now, so housekeeping may forget them after their TTL."""
    if not settling:
        return
    deposits = _deposits_of(settling)
    processed_events.settle(
        cur, (idempotency_key(d, EventType.DEPOSIT.value) for d in deposits),
        Outcome.PENDING_FINALITY, outcome)
    processed_events.settle(
        cur, (idempotency_key(f"{d}:credited", SettlementType.DEPOSIT_CREDITED.value)
              for d in deposits),
        Outcome.CREDITED, Outcome.APPLIED)
    chain_deposits.settle(cur, [c.event for c in settling], state)


def _record_reversals(cur: Cursor, reversals: Sequence[Candidate], plan: Plan) -> None:
    """The shortfall of each reversal (if any) and a line each (_notify tells the user). Only
    for events planned in this transaction: a replay does nothing here."""
    owed = {id(c): amount for c, amount in plan.shortfalls}
    short = [c for c in reversals if id(c) in owed]
    if short:
        cur.executemany(
            "INSERT INTO account_shortfalls (user_id, asset, source_event_id,"
            " deposit_event_id, amount) VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (source_event_id) DO NOTHING",
            [(c.event.user_id, c.event.asset, c.event.event_id, str(c.event.settles),
              format_amount(owed[id(c)])) for c in short])
    for c in reversals:
        event = c.event
        trace_id = c.trace_id or event.event_id
        shortfall = owed.get(id(c), Decimal(0))
        debited = event.amount - shortfall
        count_reversal(shortfall > 0)
        fields = dict(trace_id=trace_id, event_id=event.event_id,
                      deposit_event_id=event.settles, user_id=event.user_id,
                      asset=event.asset, amount=format_amount(event.amount),
                      debited=format_amount(debited),
                      reason=(event.chain or {}).get("reason"))
        if shortfall > 0:
            # Money left the platform on a credit the chain took back: a human must act.
            log.critical("deposit_reversal_shortfall", shortfall=format_amount(shortfall),
                         account_flagged=True, **fields)
        else:
            log.warning("deposit_reversed", **fields)


def _record_shortfalls(cur: Cursor, short: Sequence[Candidate], plan: Plan) -> None:
    """What a refund, chargeback, revert or debit adjustment could not take from
    available: an account_shortfalls row (the user is flagged), the platform's
    receivable already posted, and a critical line each (_notify tells the user)."""
    owed = {id(c): amount for c, amount in plan.shortfalls}
    cur.executemany(
        "INSERT INTO account_shortfalls (user_id, asset, source_event_id,"
        " deposit_event_id, amount) VALUES (%s, %s, %s, %s, %s)"
        " ON CONFLICT (source_event_id) DO NOTHING",
        [(c.event.user_id, c.event.asset, c.event.event_id,
          c.event.reference or c.event.event_id, format_amount(owed[id(c)])) for c in short])
    for c in short:
        event = c.event
        trace_id = c.trace_id or event.event_id
        log.critical("shortfall_opened", trace_id=trace_id, event_id=event.event_id,
                     event_type=event.event_type.value, reverses=event.reference,
                     user_id=event.user_id, asset=event.asset,
                     amount=format_amount(event.amount),
                     shortfall=format_amount(owed[id(c)]), account_flagged=True)


def _log_rejections(rejected: Sequence[Candidate], plan: Plan) -> None:
    """A line per rejected debit (insufficient_funds, account_flagged, ...); the user is
    told by the batch's intents (_notify)."""
    reasons = {id(c): o for c, o in plan.decisions}
    for c in rejected:
        event = c.event
        log.info("event_rejected", trace_id=c.trace_id or event.event_id,
                 event_id=event.event_id, event_type=event.event_type.value,
                 user_id=event.user_id, asset=event.asset, reason=reasons[id(c)].value,
                 amount=format_amount(event.amount),
                 balance_after_batch=format_amount(plan.closing.get(c.pair, Decimal(0))))


def _notify(cur: Cursor, plan: Plan) -> None:
    """Step 8's notification intents: one per user-visible change planned in this
    transaction (notify/intents.py says which), plus a shortfall.opened per
    shortfall, and the invoice.* intents of the invoices the batch's deposits pay
    (invoices/matching.py matches them here, in this transaction: no query for a batch
    without deposits or settlements), all in one outbox round trip: a record per source
    partition (key `<topic>-<partition>`, so a user's intents always take the same
    notification partition, in order). Only events planned here: a redelivered event
    was dropped as a duplicate at step 6 and notifies nobody twice, nor pays an
    invoice twice."""
    created_at = intents.now_text()
    owed = {id(c): amount for c, amount in plan.shortfalls}
    by_source: dict[tuple[str, int], list[tuple[intents.Intent, str]]] = {}
    for c, outcome in plan.decisions:
        event = c.event
        trace_id = c.trace_id or event.event_id
        short = owed.get(id(c), ZERO)
        extra: dict[str, object] = {}
        if event.event_type is SettlementType.DEPOSIT_REVERSED:
            extra = {"reason": (event.chain or {}).get("reason"),
                     "debited": format_amount(event.amount - short) if event.amount > short
                     else "0"}
        if short > 0:
            extra["shortfall"] = format_amount(short)
            extra["account_flagged"] = True
        intent = intents.of_outcome(event, outcome, created_at, **extra)
        source = (c.record.origin.topic, c.record.origin.partition)
        if intent is not None:
            by_source.setdefault(source, []).append((intent, trace_id))
        if short > 0:
            by_source.setdefault(source, []).append((intents.new_intent(
                intents.IntentType.SHORTFALL_OPENED, event.event_id, event.user_id,
                event_type=event.event_type.value, asset=event.asset, amount=short,
                created_at=created_at, reference=event.reference or event.settles),
                trace_id))
    for c, intent in matching.match(cur, [(c, c.event, o) for c, o in plan.decisions],
                                    created_at):
        by_source.setdefault((c.record.origin.topic, c.record.origin.partition), []).append(
            (intent, c.trace_id or c.event.event_id))
    publish(cur, NOTIFICATIONS_AGGREGATE,
            [message for (topic, partition), batch in sorted(by_source.items())
             for message in intents.outbox_batches(batch, f"{topic}-{partition}")])


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
