"""`paystream consume scanner`: a chain scanner thread per network, until SIGTERM/SIGINT;
and the rescan of a range that `paystream chain scan` runs.

A pass (ChainScanner.scan_once), in one transaction of store.ScanStore:
  1. lock the network's cursor (another scanner holds it: skip the pass);
  2. target = the finalized block, or head - credit depth on a network crediting early
     (the watcher's own heights: finality.rpc, cached);
  3. the cursor's block hash still on the chain? If not, a reorg replaced it: start
     again `rewind_blocks` below it (rescanning is idempotent);
  4. read the next range (at most `range_blocks`, fewer while the node refuses): its
     blocks with their transactions and its ERC-20 Transfer logs (blocks.py), the
     receipts of the blocks paying our addresses native coin (a failed transfer moved
     nothing: eth_getBlockReceipts, batched) and
     each new token's decimals();
  5. write the deposits into our addresses through the outbox, move the cursor to the
     range's last block and hash, COMMIT.
Every RPC call goes through the watcher's client for the network (finality.watcher's
rpc_for: timeouts, breaker, call metrics). A failing pass (RPC or DB) changes nothing
and is retried at the next poll. The finality watcher then judges the recorded deposits
as it judges a webhook's: the scanner only records them.

After each pass, one range of the oldest open backfill (ChainScanner.backfill_once: an
address registered with --scan-from / scan_from_block) is read the same way, for that
address only, through the same write path and event ids.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import psycopg2
import structlog

from paystream.finality.breaker import CircuitOpenError
from paystream.finality.evidence import (
    TRANSFER_TOPIC,
    BlockRef,
    MalformedResultError,
    Receipt,
)
from paystream.finality.rpc import ChainRpc, RpcError, RpcRejectedError, RpcUnavailableError
from paystream.finality.scanner import metrics
from paystream.finality.scanner.blocks import (
    DECIMALS_CALL,
    NATIVE_DECIMALS,
    FoundTransfer,
    RangeSizer,
    block_time,
    decimals_answer,
    native_transfers,
    ours,
    token_transfer,
)
from paystream.finality.scanner.settings import ScanSettings
from paystream.finality.scanner.store import ScannerBusyError, ScanPass, ScanStore, Written
from paystream.finality.service import run_threads
from paystream.finality.watcher import rpc_for
from paystream.schema.events import PaymentEvent

log = structlog.get_logger("paystream.scanner")
DEFAULT_METRICS_PORT = 9406


@dataclass(frozen=True)
class Range:
    """A range read from the chain: its last block, and the transfers in it."""

    first: int
    last: BlockRef
    transfers: list[FoundTransfer]


class ChainScanner:
    """One network's scanner. Not thread-safe: one per thread (its store's connection)."""

    def __init__(self, rpc: ChainRpc, store: ScanStore, *, range_blocks: int = 100,
                 rewind_blocks: int = 64, credit_depth: int | None = None) -> None:
        self.rpc = rpc
        self.store = store
        self.network = rpc.network
        self.sizer = RangeSizer(range_blocks)
        self.rewind_blocks = rewind_blocks
        self.credit_depth = credit_depth
        self._decimals: dict[str, int | None] = {}

    # --- the loop's pass ------------------------------------------------------------

    def scan_once(self) -> int:
        """One pass; the number of blocks it scanned (0: caught up, or just started).
        Raises ScannerBusyError when another scanner holds the cursor."""
        with self.store.pass_for(self.network) as scan:
            cursor = scan.cursor()
            target = self.target()
            metrics.TARGET_BLOCK.labels(network=self.network).set(target)
            if cursor is None:
                # The first pass starts at the target: history is `chain scan`'s job.
                if scan.start_at(BlockRef(target, self._hash(target))):
                    log.info("scanner_cursor_created", network=self.network, block=target)
                metrics.CURSOR_BLOCK.labels(network=self.network).set(target)
                return 0
            start = cursor.number + 1
            if self.rpc.block_hash(cursor.number) != cursor.hash:
                start = max(0, cursor.number - self.rewind_blocks)
                metrics.REORGS.labels(network=self.network).inc()
                log.warning("scanner_reorg_below_cursor", network=self.network,
                            cursor=cursor.number, cursor_hash=cursor.hash, rescan_from=start)
            span = self.sizer.next_range(start, target)
            if span is None:
                return 0
            found = self.read(*span)
            written = self.record(scan, found)
            scan.move_to(found.last)
        metrics.CURSOR_BLOCK.labels(network=self.network).set(found.last.number)
        self._count(found, written)
        return found.last.number - found.first + 1

    def scan_range(self, first: int, last: int) -> Written:
        """Rescan first..last (`paystream chain scan`): the deposits found written, a
        transaction per range read, the cursor untouched. Idempotent."""
        total = Written()
        start = first
        while (span := self.sizer.next_range(start, last)) is not None:
            found = self.read(*span)
            with self.store.pass_for(self.network) as scan:
                written = self.record(scan, found)
            self._count(found, written)
            total.accepted += written.accepted
            total.known += written.known
            start = found.last.number + 1
        return total

    def backfill_once(self) -> int:
        """One range of the oldest open backfill (an address's past, schema.scan_backfills):
        that address's deposits written and the backfill's progress moved in one
        transaction, under the cursor's lock, so no pass moves the cursor meanwhile. Its
        end is the cursor at its first range: the passes past it already see the address.
        The number of blocks read (0: none open, or no cursor yet)."""
        with self.store.pass_for(self.network) as scan:
            cursor = scan.cursor()
            backfill = scan.open_backfill() if cursor is not None else None
            if cursor is None or backfill is None:
                return 0
            up_to = cursor.number if backfill.up_to_block is None else backfill.up_to_block
            span = self.sizer.next_range(backfill.next_block, up_to)
            if span is None:
                scan.backfill_moved(backfill, backfill.next_block, up_to)
                return 0
            found = self.read(*span)
            mine = Range(found.first, found.last,
                         [t for t in found.transfers if t.recipient == backfill.address])
            written = self.record(scan, mine)
            scan.backfill_moved(backfill, found.last.number + 1, up_to)
        self._count(found, written)
        if found.last.number >= up_to:
            log.info("scanner_backfill_done", network=self.network, address=backfill.address,
                     backfill_id=backfill.backfill_id, up_to_block=up_to)
        return found.last.number - found.first + 1

    def target(self) -> int:
        """The block the scanner reads up to: what the watcher may credit at."""
        if self.credit_depth is None:
            return self.rpc.finalized_block().number
        return max(self.rpc.head() - self.credit_depth, 0)

    # --- reading the chain --------------------------------------------------------------

    def read(self, first: int, last: int) -> Range:
        """The transfers of blocks first..last (fewer blocks while the node refuses the
        range as too large); raises RpcError when the chain cannot be read consistently."""
        while True:
            try:
                raw_logs = self.rpc.logs(first, last, [TRANSFER_TOPIC])
                break
            except RpcRejectedError:
                if not self.sizer.refused():
                    raise
                last = first + self.sizer.size - 1
                log.info("scanner_range_shrunk", network=self.network, blocks=self.sizer.size)
        self.sizer.answered()
        try:
            return self._transfers(first, last, raw_logs)
        except MalformedResultError as exc:
            raise RpcUnavailableError("scan", str(exc)) from exc

    def _transfers(self, first: int, last: int, raw_logs: Sequence[Any]) -> Range:
        hashes: dict[int, str] = {}
        times: dict[int, int | None] = {}
        transfers: list[FoundTransfer] = []
        numbers = range(first, last + 1)
        for number, raw in zip(numbers, self.rpc.full_blocks(numbers), strict=True):
            if raw is None:
                raise RpcUnavailableError("eth_getBlockByNumber", f"no block {number} yet")
            ref, native = native_transfers(self.network, raw)
            hashes[ref.number] = ref.hash
            times[ref.number] = block_time(raw)
            transfers.extend(native)
        for raw in raw_logs:
            transfer = token_transfer(self.network, raw)
            if transfer is None:
                continue
            if hashes.get(transfer.block_number) != transfer.block_hash:
                # The logs and the blocks straddle a reorg: read the range again later.
                raise RpcUnavailableError("eth_getLogs", f"block {transfer.block_number}"
                                          " changed mid-read")
            transfers.append(replace(transfer, block_time=times[transfer.block_number]))
        return Range(first, BlockRef(last, hashes[last]), transfers)

    def record(self, scan: ScanPass, found: Range) -> Written:
        """The deposit events of `found` into our addresses, written in `scan`."""
        events: list[PaymentEvent] = []
        owners = scan.owners([t.recipient for t in found.transfers])
        mine = ours(found.transfers, owners)
        receipts = self._native_receipts([t for t, _ in mine if t.token_contract is None])
        for transfer, user_id in mine:
            decimals = self._decimals_of(transfer, receipts)
            event = None if decimals is None else transfer.event(user_id, decimals)
            if event is not None:
                events.append(event)
        trace_id = f"scan:{self.network}:{found.first}-{found.last.number}"[:128]
        return scan.write(events, trace_id)

    def _native_receipts(self, natives: Sequence[FoundTransfer]) -> dict[str, Receipt]:
        """The receipts of native transfers by tx hash, read a block's at once
        (eth_getBlockReceipts, batched): the cost grows with the blocks paying our
        addresses, not with the transfers in them."""
        if not natives:
            return {}
        blocks = self.rpc.blocks_evidence(sorted({t.block_number for t in natives}), set())
        return {tx: r for block in blocks.values() for tx, r in block.receipts.items()}

    def _decimals_of(self, transfer: FoundTransfer, receipts: Mapping[str, Receipt]
                     ) -> int | None:
        """The transfer's decimals, or None (counted) when it moved nothing we can credit."""
        if transfer.token_contract is None:
            receipt = receipts.get(transfer.tx_hash)
            if receipt is None or receipt.block_hash != transfer.block_hash:
                raise RpcUnavailableError("eth_getBlockReceipts",
                                          f"{transfer.tx_hash} changed block mid-read")
            if receipt.status != 1:
                self._skip("tx_failed", transfer)
                return None
            return NATIVE_DECIMALS
        contract = transfer.token_contract
        if contract not in self._decimals:
            self._decimals[contract] = decimals_answer(self.rpc.call(contract, DECIMALS_CALL))
        decimals = self._decimals[contract]
        if decimals is None:
            self._skip("no_decimals", transfer)
        return decimals

    def _skip(self, reason: str, transfer: FoundTransfer) -> None:
        metrics.SKIPPED.labels(network=self.network, reason=reason).inc()
        log.warning("scanner_transfer_skipped", network=self.network, reason=reason,
                    event_id=transfer.event_id)

    def _hash(self, number: int) -> str:
        found = self.rpc.block_hash(number)
        if found is None:
            raise RpcUnavailableError("eth_getBlockByNumber", f"no block {number}")
        return found

    def _count(self, found: Range, written: Written) -> None:
        blocks = found.last.number - found.first + 1
        metrics.BLOCKS.labels(network=self.network).inc(blocks)
        metrics.DEPOSITS.labels(network=self.network, outcome="accepted").inc(
            len(written.accepted))
        metrics.DEPOSITS.labels(network=self.network, outcome="known").inc(len(written.known))
        if written.accepted:
            log.info("scanner_deposits_recorded", network=self.network, first=found.first,
                     last=found.last.number, event_ids=written.accepted)

    # --- the loop -----------------------------------------------------------------------

    def run(self, poll_seconds: float, stop: threading.Event) -> None:
        """Pass after pass until `stop`: at once while behind, every `poll_seconds` once
        caught up or after a failure."""
        while not stop.is_set():
            started = time.monotonic()
            scanned = 0
            try:
                scanned = self.scan_once()
                scanned += self.backfill_once()
            except ScannerBusyError:
                metrics.BUSY.labels(network=self.network).inc()
            except (RpcError, CircuitOpenError) as exc:
                metrics.FAILED.labels(network=self.network, cause="rpc").inc()
                log.warning("scanner_pass_failed", network=self.network, cause="rpc",
                            error=str(exc))
            except psycopg2.Error as exc:
                metrics.FAILED.labels(network=self.network, cause="db").inc()
                log.warning("scanner_pass_failed", network=self.network, cause="db",
                            error=str(exc).strip())
            except Exception:  # a bug: logged, the next pass tries again
                metrics.FAILED.labels(network=self.network, cause="bug").inc()
                log.exception("scanner_pass_crashed", network=self.network)
            metrics.PASS_SECONDS.labels(network=self.network).observe(
                time.monotonic() - started)
            if not scanned:
                stop.wait(poll_seconds)


def scanner_for(settings: ScanSettings, store: ScanStore | None = None) -> ChainScanner:
    return ChainScanner(rpc_for(settings.chain), store or ScanStore(),
                        range_blocks=settings.range_blocks,
                        rewind_blocks=settings.rewind_blocks,
                        credit_depth=settings.chain.credit_depth)


def run(networks: Sequence[ScanSettings], stop: threading.Event | None = None) -> int:
    """A scanner thread per network until SIGTERM/SIGINT (or `stop`)."""
    loops = []
    for settings in networks:
        log.info("scanner_started", network=settings.network, rpc_url=settings.chain.rpc_url,
                 poll_seconds=settings.poll_seconds, range_blocks=settings.range_blocks,
                 credit_depth=settings.chain.credit_depth)
        loops.append((f"scanner-{settings.network}",
                      functools.partial(scanner_for(settings).run, settings.poll_seconds)))
    return run_threads(loops, "scanner_stopping", stop)
