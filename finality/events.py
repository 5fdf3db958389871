"""What the watcher asks the outbox to carry: a proposal for the ledger's wiring.

A finalisation (or reorg, credit, reversal) is an event of its own, with its own id
derived from the deposit's event id: the same verdict recorded twice (a tick replayed
after a crash) is the same event, which the ledger's idempotency turns into a no-op.

  deposit state   verdict                    event (type, id suffix)
  pending         FINAL                      deposit_finalized  :finalized
  pending         REORGED                    deposit_reorged    :reorged
  pending         CONFIRMED (credit depth)   deposit_credited   :credited
  credited        FINAL                      deposit_finalized  :finalized, credited=true
  credited        REORGED / UNCONFIRMED      deposit_reversed   :reversed
                  (after the grace)

A deposit gets at most one of :finalized / :reorged / :reversed, so the ids never clash.
"""

from __future__ import annotations

from typing import Any

from paystream.finality.verify import ChainOutcome, FinalityVerdict
from paystream.schema.chain import ExpectedDeposit

FINALIZED_EVENT_TYPE = "deposit_finalized"
REORGED_EVENT_TYPE = "deposit_reorged"
CREDITED_EVENT_TYPE = "deposit_credited"
REVERSED_EVENT_TYPE = "deposit_reversed"

_TAKES_BACK = (ChainOutcome.REORGED, ChainOutcome.UNCONFIRMED)


def event_type(verdict: FinalityVerdict, credited: bool = False) -> str:
    """The settlement type of `verdict` for a deposit `credited` before finality or not."""
    if verdict.outcome is ChainOutcome.FINAL:
        return FINALIZED_EVENT_TYPE
    if verdict.outcome is ChainOutcome.CONFIRMED and not credited:
        return CREDITED_EVENT_TYPE
    if verdict.outcome in _TAKES_BACK and credited:
        return REVERSED_EVENT_TYPE
    if verdict.outcome is ChainOutcome.REORGED:
        return REORGED_EVENT_TYPE
    raise ValueError(f"a {verdict.outcome} verdict is not an event"
                     f" for a {'credited' if credited else 'pending'} deposit")


def event_id(deposit: ExpectedDeposit, verdict: FinalityVerdict, credited: bool = False) -> str:
    """`<deposit event id>:finalized` / `:reorged` / `:credited` / `:reversed`."""
    suffix = {FINALIZED_EVENT_TYPE: "finalized", REORGED_EVENT_TYPE: "reorged",
              CREDITED_EVENT_TYPE: "credited", REVERSED_EVENT_TYPE: "reversed"}
    return f"{deposit.event_id}:{suffix[event_type(verdict, credited)]}"


def payload(deposit: ExpectedDeposit, verdict: FinalityVerdict, credited: bool = False
            ) -> dict[str, Any]:
    """The JSON body: which deposit, and where it is final or deep enough (or why not)."""
    body: dict[str, Any] = {
        "event_id": event_id(deposit, verdict, credited),
        "event_type": event_type(verdict, credited),
        "deposit_event_id": deposit.event_id,
        "network": deposit.network,
        "tx_hash": deposit.tx_hash,
        "reported_block_number": deposit.block_number,
        "reported_block_hash": deposit.block_hash,
    }
    if verdict.outcome in (ChainOutcome.FINAL, ChainOutcome.CONFIRMED):
        assert verdict.block is not None
        body.update(block_number=verdict.block.number, block_hash=verdict.block.hash,
                    moved=verdict.moved, log_index=verdict.log_index,
                    unchecked=list(verdict.unchecked))
        if credited:
            body["credited"] = True  # the money moved at deposit_credited: none now
    else:
        body["reason"] = verdict.reason
    return body
