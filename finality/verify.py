"""Is a pending deposit final? One pure function: the expected transfer + the chain's
evidence → FINAL, REORGED(reason) or NOT_YET.

The expected transfer is what the provider reported (schema.chain.ExpectedDeposit, read
from PaymentEvent.chain, written by ingest/alchemy.py). The evidence is the receipt found
BY TRANSACTION HASH on the canonical chain (and, for native coin, the transaction
itself: receipts carry no value).

Rules, in order:
  1. No receipt: NOT_YET while the reported block is above the finalized block (the
     node may still be catching up), else REORGED("tx_not_in_chain").
  2. The receipt's block is above the finalized block: NOT_YET (a reorg moved the
     transaction to a later block; it is judged when that block is final).
  3. status != 1: REORGED("tx_reverted") (the same hash reverted in the new history).
  4. The transfer itself must be there: for a token, a Transfer log of the reported
     contract to the recipient for exactly raw_value; for native coin, tx.to and
     tx.value; otherwise REORGED("<what>_mismatch").
  5. FINAL, carrying the block it is final in. `moved` says that block is not the one
     the provider reported (same transaction re-included elsewhere): the ledger records
     the new block. A token log's index is its position in the BLOCK, so a moved log
     is found by content and the verdict carries its new index.
Internal transfers (typeTraceAddress) are checked for inclusion and success only: their
value lives in traces, not receipts (`unchecked` says so).

`judge` adds the credit height of a network with a credit depth (head - depth, below
the head, above the finalized block): the same rules applied at that height say
CONFIRMED (deep enough to credit, not final) or UNCONFIRMED(reason) (at that height the
transfer is gone, reverted or mismatched; finality has not spoken yet). Finality's own
verdict always wins: FINAL and REORGED come from the finalized block only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from paystream.finality.evidence import (
    TRANSFER_TOPIC,
    BlockRef,
    LogEntry,
    Receipt,
    Transaction,
)
from paystream.schema.chain import DepositKind, ExpectedDeposit


class ChainOutcome(StrEnum):
    """What the chain says about a deposit (a FinalityVerdict's outcome)."""

    FINAL = "final"
    REORGED = "reorged"
    NOT_YET = "not_yet"
    CONFIRMED = "confirmed"  # deep enough to credit (credit height), not final yet
    UNCONFIRMED = "unconfirmed"  # not there (any more) at the credit height, not final


@dataclass(frozen=True)
class FinalityVerdict:
    """The watcher's judgement of one deposit against the chain's evidence."""

    outcome: ChainOutcome
    reason: str | None = None
    block: BlockRef | None = None  # where the transfer is final (FINAL only)
    moved: bool = False  # FINAL in another block than the provider reported
    log_index: int | None = None  # the token log's index in `block`
    unchecked: tuple[str, ...] = field(default=())

    @property
    def is_final(self) -> bool:
        return self.outcome is ChainOutcome.FINAL


def not_yet(reason: str) -> FinalityVerdict:
    return FinalityVerdict(ChainOutcome.NOT_YET, reason)


def reorged(reason: str) -> FinalityVerdict:
    return FinalityVerdict(ChainOutcome.REORGED, reason)


def verify(expected: ExpectedDeposit, *, finalized: int, receipt: Receipt | None,
           transaction: Transaction | None = None) -> FinalityVerdict:
    """Judge one deposit; `finalized` is the chain's finalized block number."""
    if receipt is None:
        if expected.block_number > finalized:
            return not_yet("block_not_final")
        return reorged("tx_not_in_chain")
    if receipt.tx_hash != expected.tx_hash:
        raise ValueError(f"receipt of {receipt.tx_hash} given for {expected.tx_hash}")
    if receipt.block_number > finalized:
        return not_yet("block_not_final" if receipt.block_number == expected.block_number
                       else "moved_block_not_final")
    if receipt.status != 1:
        return reorged("tx_reverted")
    moved = (receipt.block_hash != expected.block_hash if expected.block_hash is not None
             else receipt.block_number != expected.block_number)
    if expected.kind is DepositKind.TOKEN:
        log = _transfer_log(expected, receipt, moved)
        if isinstance(log, str):
            return reorged(log)
        return FinalityVerdict(ChainOutcome.FINAL, block=receipt.block, moved=moved,
                               log_index=log.log_index)
    if expected.kind is DepositKind.EXTERNAL:
        if transaction is None:
            raise ValueError(f"{expected.event_id}: a native deposit needs its transaction")
        if transaction.tx_hash != expected.tx_hash:
            raise ValueError(f"transaction {transaction.tx_hash} given for {expected.tx_hash}")
        if transaction.to != expected.recipient:
            return reorged("recipient_mismatch")
        if transaction.value != expected.raw_value:
            return reorged("amount_mismatch")
        return FinalityVerdict(ChainOutcome.FINAL, block=receipt.block, moved=moved)
    # Internal: inclusion and success only (see the module docstring).
    return FinalityVerdict(ChainOutcome.FINAL, block=receipt.block, moved=moved,
                           unchecked=("internal_value",))


def judge(expected: ExpectedDeposit, *, finalized: int, confirmed: int | None,
          receipt: Receipt | None, transaction: Transaction | None = None) -> FinalityVerdict:
    """verify() at the finalized block; if that says NOT_YET and a credit height
    `confirmed` above it is given, verify() again there (same evidence, no RPC):
    FINAL there is CONFIRMED, REORGED there is UNCONFIRMED (with its reason)."""
    verdict = verify(expected, finalized=finalized, receipt=receipt, transaction=transaction)
    if (verdict.outcome is not ChainOutcome.NOT_YET or confirmed is None
            or confirmed <= finalized):
        return verdict
    at_credit = verify(expected, finalized=confirmed, receipt=receipt,
                       transaction=transaction)
    if at_credit.outcome is ChainOutcome.FINAL:
        return replace(at_credit, outcome=ChainOutcome.CONFIRMED)
    if at_credit.outcome is ChainOutcome.REORGED:
        return FinalityVerdict(ChainOutcome.UNCONFIRMED, at_credit.reason)
    return verdict


def _transfer_log(expected: ExpectedDeposit, receipt: Receipt, moved: bool) -> LogEntry | str:
    """The expected Transfer log in the receipt, or the reason it is not there."""
    if not moved:
        by_index = [entry for entry in receipt.logs if entry.log_index == expected.log_index]
        if not by_index:
            return "log_missing"
        problem = _mismatch(expected, by_index[0])
        return problem if problem is not None else by_index[0]
    # Re-included elsewhere: indexes shifted; find the same transfer by content.
    for entry in receipt.logs:
        if _mismatch(expected, entry) is None:
            return entry
    return "log_missing"


def _mismatch(expected: ExpectedDeposit, log: LogEntry) -> str | None:
    if log.removed:
        return "log_removed"
    if log.address != expected.token_contract:
        return "token_contract_mismatch"
    if len(log.topics) != 3 or log.topics[0] != TRANSFER_TOPIC:
        return "not_a_transfer"
    if _topic_address(log.topics[2]) != expected.recipient:
        return "recipient_mismatch"
    try:
        value = int(log.data, 16) if log.data not in ("0x", "") else 0
    except ValueError:
        return "amount_mismatch"
    if value != expected.raw_value:
        return "amount_mismatch"
    return None


def _topic_address(topic: str) -> str:
    # An indexed address is the low 20 bytes of a 32-byte topic.
    return "0x" + topic[-40:]
