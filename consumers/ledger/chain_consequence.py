"""Chain deposits, a consequence of the ledger's batch (consequences.py): what the plan
decided about deposits held until final, written to chain_deposits and to the events'
statuses (docs/finality.md). Declared below (CONSEQUENCE), as every feature declares its
own (paystream/ledger_consequences.py).

- a chain deposit planned pending_finality is held (chain_deposits.hold) for the
  finality watcher;
- deposit_finalized / deposit_reorged / deposit_reversed move their deposit to final /
  reorged / reversed, and the deposit's waiting outcome (pending_finality, and its
  deposit_credited's `credited`) to the final one, so housekeeping may forget them;
- deposit_credited marks the deposit credited before finality;
- a reversal is logged (critical when the balance could not cover it: a shortfall,
  recorded with the ledger's other shortfalls) and counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal

import structlog

from paystream.consumers.ledger import shortfalls
from paystream.consumers.ledger.consequences import AppliedBatch
from paystream.consumers.ledger.metrics import count_reversal
from paystream.consumers.ledger.plan import Candidate, Plan
from paystream.ledger_consequences import Declared
from paystream.schema import chain_deposits, processed_events
from paystream.schema.amounts import format_amount
from paystream.schema.chain_deposits import DepositState
from paystream.schema.db import Cursor
from paystream.schema.events import EventType, SettlementType
from paystream.schema.idempotency import idempotency_key
from paystream.schema.processed_events import Outcome
from paystream.schema.status import EventStatus, transition

log = structlog.get_logger("consumers.ledger")


class ChainDeposits:
    name = "chain_deposits"

    def write(self, cur: Cursor, batch: AppliedBatch) -> None:
        plan = batch.plan
        applied = plan.with_outcome(Outcome.APPLIED)
        pending = plan.with_outcome(Outcome.PENDING_FINALITY)
        reorged = plan.with_outcome(Outcome.REORGED)
        credited = plan.with_outcome(Outcome.CREDITED)
        finalized = _of_type(applied, SettlementType.DEPOSIT_FINALIZED)
        reversed_ = (_of_type(applied, SettlementType.DEPOSIT_REVERSED)
                     + [c for c in plan.with_outcome(Outcome.SHORTFALL)
                        if c.event.settles is not None])
        chain_deposits.hold(cur, [(c.event, c.trace_id or c.event.event_id)
                                  for c in pending])
        _settle(cur, finalized, DepositState.FINAL, Outcome.APPLIED)
        _settle(cur, reorged, DepositState.REORGED, Outcome.REORGED)
        chain_deposits.credit(cur, (str(c.event.settles) for c in credited))
        if reversed_:
            _settle(cur, reversed_, DepositState.REVERSED, Outcome.REVERSED)
            _record_reversals(cur, reversed_, plan)
        transition(cur, sorted({c.event.event_id for c in pending}),
                   EventStatus.PENDING_FINALITY)
        transition(cur, _deposits_of(finalized), EventStatus.APPLIED)
        transition(cur, _deposits_of(reorged), EventStatus.REORGED)
        transition(cur, _deposits_of(credited), EventStatus.CREDITED)
        transition(cur, _deposits_of(reversed_), EventStatus.REVERSED)


def _of_type(candidates: Sequence[Candidate], kind: SettlementType) -> list[Candidate]:
    return [c for c in candidates if c.event.event_type is kind]


def _deposits_of(settlements: Iterable[Candidate]) -> list[str]:
    return sorted({str(c.event.settles) for c in settlements})


def _settle(cur: Cursor, settling: Sequence[Candidate], state: DepositState,
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
    """The shortfall of each reversal (if any) and a line each (the notifications
    consequence tells the user)."""
    owed = {id(c): amount for c, amount in plan.shortfalls}
    shortfalls.record(cur, [
        (c.event.user_id, c.event.asset, c.event.event_id, str(c.event.settles),
         owed[id(c)]) for c in reversals if id(c) in owed])
    for c in reversals:
        event = c.event
        shortfall = owed.get(id(c), Decimal(0))
        count_reversal(shortfall > 0)
        fields = dict(trace_id=c.trace_id or event.event_id, event_id=event.event_id,
                      deposit_event_id=event.settles, user_id=event.user_id,
                      asset=event.asset, amount=format_amount(event.amount),
                      debited=format_amount(event.amount - shortfall),
                      reason=(event.chain or {}).get("reason"))
        if shortfall > 0:
            # Money left the platform on a credit the chain took back: a human must act.
            log.critical("deposit_reversal_shortfall", shortfall=format_amount(shortfall),
                         account_flagged=True, **fields)
        else:
            log.warning("deposit_reversed", **fields)


# Found and ordered at start-up (paystream/ledger_consequences.py): it names no other.
CONSEQUENCE = Declared("chain_deposits", ChainDeposits)
