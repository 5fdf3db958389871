"""The watcher's settlements judged before the ledger plans them (handler.py steps 2
and 4): a deposit_finalized, _reorged, _credited or _reversed is applied only if the
chain deposit it names is held, matches it, and is in the state the watcher decided
(the watcher moves it there in the transaction that writes the settlement to the
outbox); and a settlement whose deposit is already where it leads was applied before.

Chain deposits (docs/finality.md; see plan.py's table): a deposit carrying `chain` is held
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

from collections.abc import Sequence

from paystream.consumers.ledger.plan import Candidate
from paystream.schema import chain_deposits, stored_events, visibility
from paystream.schema.chain_deposits import HeldDeposit
from paystream.schema.db import Cursor
from paystream.schema.events import EventType, PaymentEvent, SettlementType
from paystream.schema.processed_events import Outcome
from paystream.schema.stored_events import STATUS_CONFLICT


def judge(cur: Cursor, candidates: list[Candidate]
                        ) -> tuple[dict[str, HeldDeposit], dict[int, tuple[str, str]]]:
    """The held deposits the batch's settlements name, and the settlements no deposit
    explains (by id(), with their reason). A refusal that rests on the deposit's row
    (missing, or not yet in the state the watcher decided) is judged again after each
    of visibility.waits; an id not derived from its deposit's is not."""
    settling = [c for c in candidates if c.event.settles is not None]
    if not settling:
        return {}, {}
    deposits = chain_deposits.held(cur, (str(c.event.settles) for c in settling))
    problems = _problems(settling, deposits)
    if _settled(problems):
        return deposits, problems
    for _ in visibility.waits(cur):
        deposits.update(chain_deposits.held(
            cur, (str(c.event.settles) for c in settling if id(c) in problems)))
        problems = _problems(settling, deposits)
        if _settled(problems):
            break
    return deposits, problems


def _settled(problems: dict[int, tuple[str, str]]) -> bool:
    """Nothing left that a row not yet visible could explain."""
    return all(reason == stored_events.UNKNOWN_EVENT for reason, _ in problems.values())


def _problems(candidates: list[Candidate], deposits: dict[str, HeldDeposit]
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


def on_record(cur: Cursor, candidates: Sequence[Candidate],
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
