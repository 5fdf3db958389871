"""What the watcher asks the outbox to carry: a proposal for the ledger's wiring.

A finalisation (or reorg) is an event of its own, with its own id derived from the
deposit's event id: the same verdict recorded twice (a tick replayed after a crash)
is the same event, which the ledger's idempotency turns into a no-op.
"""

from __future__ import annotations

from typing import Any

from consumers.finality.verify import ExpectedDeposit, Outcome, Verdict

FINALIZED_EVENT_TYPE = "deposit_finalized"
REORGED_EVENT_TYPE = "deposit_reorged"


def event_id(deposit: ExpectedDeposit, verdict: Verdict) -> str:
    """`<deposit event id>:finalized` or `:reorged` (never both: one verdict per deposit)."""
    if verdict.outcome is Outcome.FINAL:
        return f"{deposit.event_id}:finalized"
    if verdict.outcome is Outcome.REORGED:
        return f"{deposit.event_id}:reorged"
    raise ValueError("a NOT_YET verdict is not an event")


def event_type(verdict: Verdict) -> str:
    return FINALIZED_EVENT_TYPE if verdict.outcome is Outcome.FINAL else REORGED_EVENT_TYPE


def payload(deposit: ExpectedDeposit, verdict: Verdict) -> dict[str, Any]:
    """The JSON body: which deposit, and where it is final (or why it is not)."""
    body: dict[str, Any] = {
        "event_id": event_id(deposit, verdict),
        "event_type": event_type(verdict),
        "deposit_event_id": deposit.event_id,
        "network": deposit.network,
        "tx_hash": deposit.tx_hash,
        "reported_block_number": deposit.block_number,
        "reported_block_hash": deposit.block_hash,
    }
    if verdict.outcome is Outcome.FINAL:
        assert verdict.block is not None
        body.update(block_number=verdict.block.number, block_hash=verdict.block.hash,
                    moved=verdict.moved, log_index=verdict.log_index,
                    unchecked=list(verdict.unchecked))
    else:
        body["reason"] = verdict.reason
    return body
