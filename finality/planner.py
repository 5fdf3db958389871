"""One tick's RPC plan: group the due deposits by block, so the cost of a tick grows with
the number of distinct blocks, not with the number of deposits.

    1 call                 finalized_block()                      (cached briefly)
    1-2 calls per block    eth_getBlockReceipts (+ eth_getBlockByNumber(full) when the
                           block holds native-coin deposits), sent in JSON-RPC batches
    1-2 calls per MOVED tx eth_getTransactionReceipt (+ eth_getTransactionByHash): only
                           for deposits whose transaction is no longer in its reported
                           block (a reorg), which is rare by nature

The baseline this replaces is one eth_getTransactionReceipt per pending deposit.

On a network with a credit depth the same plan covers the blocks up to the credit height
(`confirmed`), and the credited deposits re-checked every tick share it: a block holding
pending and credited deposits is fetched once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from paystream.finality.evidence import BlockEvidence, Receipt, Transaction
from paystream.finality.rpc import ChainRpc
from paystream.finality.verify import FinalityVerdict, judge, not_yet, verify
from paystream.schema.chain import ExpectedDeposit


@dataclass(frozen=True)
class TickPlan:
    finalized: int
    by_block: dict[int, list[ExpectedDeposit]]  # due: reported block <= finalized
    waiting: int  # pending deposits above the finalized block (nothing to fetch)

    @property
    def blocks(self) -> list[int]:
        return sorted(self.by_block)

    @property
    def native_blocks(self) -> set[int]:
        return {n for n, deps in self.by_block.items() if any(d.needs_transaction
                                                              for d in deps)}


def plan(deposits: Iterable[ExpectedDeposit], finalized: int) -> TickPlan:
    by_block: dict[int, list[ExpectedDeposit]] = defaultdict(list)
    waiting = 0
    for deposit in deposits:
        if deposit.block_number <= finalized:
            by_block[deposit.block_number].append(deposit)
        else:
            waiting += 1
    return TickPlan(finalized, dict(by_block), waiting)


def check(rpc: ChainRpc, deposits: Sequence[ExpectedDeposit], finalized: int,
          confirmed: int | None = None) -> list[tuple[ExpectedDeposit, FinalityVerdict]]:
    """A verdict for every deposit (NOT_YET for those above `finalized`, or above the
    credit height `confirmed` when given: verify.judge).

    Raises RpcError/CircuitOpenError when the chain cannot be read: then no verdict at all
    is given this tick, so an outage delays finality and never decides anything.
    """
    up_to = max(finalized, confirmed) if confirmed is not None else finalized
    tick = plan(deposits, up_to)
    evidence = rpc.blocks_evidence(tick.blocks, tick.native_blocks)
    moved: dict[tuple[str, bool], tuple[Receipt | None, Transaction | None]] = {}
    results: list[tuple[ExpectedDeposit, FinalityVerdict]] = []
    for deposit in deposits:
        if deposit.block_number > up_to:
            results.append((deposit, not_yet("block_not_final")))
            continue
        receipt, transaction = _find(rpc, deposit, evidence.get(deposit.block_number),
                                     moved)
        results.append((deposit, judge(deposit, finalized=finalized, confirmed=confirmed,
                                       receipt=receipt, transaction=transaction)))
    return results


def check_one_by_one(rpc: ChainRpc, deposits: Sequence[ExpectedDeposit], finalized: int
                     ) -> list[tuple[ExpectedDeposit, FinalityVerdict]]:
    """The baseline: a receipt (and a transaction for native coin) per deposit.
    Kept for the benchmark and as a reference implementation in tests."""
    results = []
    for deposit in deposits:
        if deposit.block_number > finalized:
            results.append((deposit, not_yet("block_not_final")))
            continue
        receipt = rpc.receipt(deposit.tx_hash)
        transaction = (rpc.transaction(deposit.tx_hash)
                       if receipt is not None and deposit.needs_transaction else None)
        results.append((deposit, verify(deposit, finalized=finalized, receipt=receipt,
                                        transaction=transaction)))
    return results


def _find(rpc: ChainRpc, deposit: ExpectedDeposit, block: BlockEvidence | None,
          moved: dict[tuple[str, bool], tuple[Receipt | None, Transaction | None]]
          ) -> tuple[Receipt | None, Transaction | None]:
    """The deposit's receipt (and transaction): from its block's evidence when it is
    still there, else looked up by hash once per tick (the transaction moved or
    vanished; several token deposits may share one transaction)."""
    if block is not None and deposit.tx_hash in block.receipts:
        in_block = block.receipts[deposit.tx_hash]
        transaction = None
        if deposit.needs_transaction and block.transactions is not None:
            transaction = block.transactions.get(deposit.tx_hash)
        if not deposit.needs_transaction or transaction is not None:
            return in_block, transaction
    key = (deposit.tx_hash, deposit.needs_transaction)
    if key not in moved:
        receipt = rpc.receipt(deposit.tx_hash)
        transaction = None
        if receipt is not None and deposit.needs_transaction:
            transaction = rpc.transaction(deposit.tx_hash)
        moved[key] = (receipt, transaction)
    return moved[key]
