"""The finality watcher: one per network, one tick per `tick_seconds`.

A tick, step by step:
  0. store.mark_suspects(network)               DB only (when the store has it): reorg
                                                notices from the ingest -> suspect
  1. finalized = rpc.finalized_block()          one RPC call (cached for half a tick)
  2. due = store.due(network, finalized, limit) pending deposits at or below it (DB)
  3. verdicts = planner.check(rpc, due, ...)    1-2 RPC calls per distinct block
  4. sink.record(network, decided)              FINAL → finalisation event, REORGED →
                                                reorg event, both through the outbox, in
                                                ONE DB transaction (the sink's job)
On a network with a credit depth N, step 1 also reads the head (cached, 1 call) and
the credit height head - N; steps 2-3 then cover the pending deposits up to it and every
`credited` deposit, in ONE plan (still 1-2 calls per distinct block):
  pending   FINAL -> deposit_finalized; CONFIRMED (N deep, not final) -> deposit_credited
  credited  FINAL -> deposit_finalized(credited: no money moves);
            REORGED at finality, or UNCONFIRMED (gone / mismatched at the credit height)
            for `reorg_grace_blocks` of credit height since first seen missing
            -> deposit_reversed (the ledger's compensating debit); found again within
            the grace: the missing mark is cleared.
A pending deposit is never released before finality (a tx missing at the credit height
may be re-mined): only its credit waits.

A transaction missing from the chain is judged REORGED only once the finalized block is
`reorg_grace_blocks` past the block it was reported in (until then NOT_YET
"tx_missing_grace"): a transaction dropped by a reorg goes back to the mempool and is
usually re-mined within a few blocks; re-mined at a finalized height, it is found by
hash and becomes FINAL under its new block (verify.py, moved=True). After the grace the
deposit is reorged for good; a later re-inclusion is a new provider notice, for review.

Failure scenarios:
  - RPC down / slow / breaker open at 1 or 3: the tick records nothing; every deposit
    stays pending; DELAYED_TICKS counts it. Finality is delayed, nothing is credited,
    nothing is dead-lettered.
  - DB down at 2 or 4: the exception propagates to run(), which logs and retries next
    tick; a sink that committed half is impossible (one transaction), and a replayed
    verdict is a no-op downstream (the finalisation event id is derived from the
    deposit's event id).
  - Crash between 4 and the next tick: the recorded deposits are no longer pending.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from paystream.finality import metrics
from paystream.finality.breaker import CircuitOpenError
from paystream.finality.evidence import BlockRef
from paystream.finality.planner import check
from paystream.finality.rpc import ChainRpc, RpcError
from paystream.finality.settings import NetworkSettings
from paystream.finality.verify import ChainOutcome, FinalityVerdict, not_yet
from paystream.schema.chain import ExpectedDeposit

log = structlog.get_logger("paystream.finality")

# What a pending deposit's verdict can act on (UNCONFIRMED waits for finality).
_ACTS_ON_PENDING = (ChainOutcome.FINAL, ChainOutcome.REORGED, ChainOutcome.CONFIRMED)


class PendingStore(Protocol):
    """The ledger's pending chain deposits (the DB side, wired by the ledger)."""

    def due(self, network: str, up_to_block: int, limit: int) -> Sequence[ExpectedDeposit]:
        """Pending deposits of `network` whose reported block_number <= up_to_block,
        oldest block first, at most `limit`."""
        ...

    def backlog(self, network: str) -> tuple[int, float | None]:
        """(count of pending deposits, unix time the oldest was recorded or None)."""
        ...


class OutcomeSink(Protocol):
    def record(self, network: str, decided: Sequence[tuple[ExpectedDeposit, FinalityVerdict]],
               credited: Sequence[tuple[ExpectedDeposit, FinalityVerdict]] = ()) -> None:
        """Write one outbox event per decided deposit, all in one DB transaction.
        `decided`: pending deposits, FINAL / REORGED / CONFIRMED verdicts; `credited`
        (only passed when non-empty): credited deposits, FINAL / REORGED / UNCONFIRMED."""
        ...


@dataclass(frozen=True)
class TickReport:
    network: str
    finalized: BlockRef | None
    due: int = 0
    final: int = 0
    reorged: int = 0
    not_yet: int = 0
    credited: int = 0  # deposit_credited emitted (credit depth reached)
    rechecked: int = 0  # credited deposits re-verified this tick
    reversed: int = 0  # deposit_reversed emitted
    delayed: str | None = None  # why nothing was decided (rpc error, breaker open)
    seconds: float = 0.0


class FinalityWatcher:
    def __init__(self, rpc: ChainRpc, store: PendingStore, sink: OutcomeSink, *,
                 limit: int = 10_000, wall_clock: Callable[[], float] = time.time,
                 reorg_grace_blocks: int = 0, credit_depth: int | None = None) -> None:
        self.rpc = rpc
        self.network = rpc.network
        self.store = store
        self.sink = sink
        self.limit = limit
        self.reorg_grace_blocks = reorg_grace_blocks
        self.credit_depth = credit_depth
        self._wall = wall_clock

    def tick(self) -> TickReport:
        started = time.monotonic()
        report = self._tick()
        seconds = time.monotonic() - started
        metrics.TICK_SECONDS.labels(network=self.network).observe(seconds)
        self._publish_backlog()
        return TickReport(**{**report.__dict__, "seconds": seconds})

    def _tick(self) -> TickReport:
        mark_suspects = getattr(self.store, "mark_suspects", None)
        if mark_suspects is not None:
            mark_suspects(self.network)
        try:
            finalized = self.rpc.finalized_block()
            confirmed = (max(self.rpc.head() - self.credit_depth, 0)
                         if self.credit_depth is not None else None)
        except (RpcError, CircuitOpenError) as exc:
            return self._delayed(None, exc)
        metrics.FINALIZED_BLOCK.labels(network=self.network).set(finalized.number)
        up_to = max(finalized.number, confirmed or 0)
        due = self.store.due(self.network, up_to, self.limit)
        credited_fn = getattr(self.store, "credited", None)
        credited = credited_fn(self.network, self.limit) if credited_fn is not None else []
        if not due and not credited:
            return TickReport(self.network, finalized)
        try:
            verdicts = check(self.rpc, [*due, *(d for d, _ in credited)], finalized.number,
                             confirmed)
        except (RpcError, CircuitOpenError) as exc:
            return self._delayed(finalized, exc, due=len(due))
        pending = [(d, self._graced(d, v, finalized.number)) for d, v in verdicts[:len(due)]]
        decided = [(d, v) for d, v in pending if v.outcome in _ACTS_ON_PENDING]
        settle, marks = self._recheck(credited, [v for _, v in verdicts[len(due):]],
                                      finalized.number, confirmed)
        if marks:
            self.store.mark_missing(self.network, marks)  # type: ignore[attr-defined]
        if settle:
            self.sink.record(self.network, decided, settle)
        elif decided:
            self.sink.record(self.network, decided)
        counts = self._count(decided, settle)
        return TickReport(self.network, finalized, due=len(due), final=counts["final"],
                          reorged=counts["reorged"], credited=counts["credited"],
                          not_yet=len(due) - len(decided), rechecked=len(credited),
                          reversed=counts["reversed"])

    def _recheck(self, credited: Sequence[tuple[ExpectedDeposit, int | None]],
                 verdicts: Sequence[FinalityVerdict], finalized: int, confirmed: int | None
                 ) -> tuple[list[tuple[ExpectedDeposit, FinalityVerdict]], dict[str, int | None]]:
        """Credited deposits: which to settle now (FINAL, or reversed), and the
        missing marks to set or clear (the reversal's grace clock, in credit height)."""
        settle: list[tuple[ExpectedDeposit, FinalityVerdict]] = []
        marks: dict[str, int | None] = {}
        for (deposit, missing), verdict in zip(credited, verdicts, strict=True):
            if verdict.outcome is ChainOutcome.FINAL:
                settle.append((deposit, verdict))
            elif verdict.outcome is ChainOutcome.REORGED:
                graced = self._graced(deposit, verdict, finalized)
                if graced.outcome is ChainOutcome.REORGED:
                    settle.append((deposit, graced))
            elif verdict.outcome is ChainOutcome.UNCONFIRMED and confirmed is not None:
                since = missing if missing is not None else confirmed
                if confirmed >= since + self.reorg_grace_blocks:
                    settle.append((deposit, verdict))
                elif missing is None:
                    marks[deposit.event_id] = confirmed
                    log.warning("credited_deposit_missing", network=self.network,
                                event_id=deposit.event_id, tx_hash=deposit.tx_hash,
                                block_number=deposit.block_number, reason=verdict.reason,
                                credit_height=confirmed, grace_blocks=self.reorg_grace_blocks)
            elif verdict.outcome is ChainOutcome.CONFIRMED and missing is not None:
                marks[deposit.event_id] = None  # re-mined within the grace: back
                log.info("credited_deposit_found_again", network=self.network,
                         event_id=deposit.event_id, missing_since=missing)
        return settle, marks

    def _count(self, decided: Sequence[tuple[ExpectedDeposit, FinalityVerdict]],
               settle: Sequence[tuple[ExpectedDeposit, FinalityVerdict]]) -> dict[str, int]:
        counts = {"final": 0, "reorged": 0, "credited": 0, "reversed": 0}
        net = self.network
        for deposit, verdict in decided:
            if verdict.outcome is ChainOutcome.FINAL:
                counts["final"] += 1
                metrics.FINALISATIONS.labels(network=net,
                                             moved=str(verdict.moved).lower()).inc()
            elif verdict.outcome is ChainOutcome.CONFIRMED:
                counts["credited"] += 1
                metrics.CREDITS.labels(network=net).inc()
            else:
                counts["reorged"] += 1
                metrics.REORGS.labels(network=net, reason=verdict.reason).inc()
                log.warning("deposit_reorged", network=net,
                            event_id=deposit.event_id, tx_hash=deposit.tx_hash,
                            block_number=deposit.block_number, reason=verdict.reason)
        for deposit, verdict in settle:
            if verdict.outcome is ChainOutcome.FINAL:
                counts["final"] += 1
                metrics.FINALISATIONS.labels(network=net,
                                             moved=str(verdict.moved).lower()).inc()
            else:
                counts["reversed"] += 1
                metrics.REVERSALS.labels(network=net, reason=verdict.reason).inc()
                log.warning("credited_deposit_reversed", network=net,
                            event_id=deposit.event_id, tx_hash=deposit.tx_hash,
                            block_number=deposit.block_number, reason=verdict.reason,
                            at_finality=verdict.outcome is ChainOutcome.REORGED)
        return counts

    def _graced(self, deposit: ExpectedDeposit, verdict: FinalityVerdict,
                finalized: int) -> FinalityVerdict:
        if (verdict.outcome is ChainOutcome.REORGED and verdict.reason == "tx_not_in_chain"
                and finalized < deposit.block_number + self.reorg_grace_blocks):
            return not_yet("tx_missing_grace")
        return verdict

    def _delayed(self, finalized: BlockRef | None, exc: Exception, due: int = 0
                 ) -> TickReport:
        cause = "breaker_open" if isinstance(exc, CircuitOpenError) else "rpc_error"
        metrics.DELAYED_TICKS.labels(network=self.network, cause=cause).inc()
        if isinstance(exc, CircuitOpenError):
            metrics.RPC_SHORT_CIRCUITS.labels(network=self.network).inc()
        log.warning("finality_delayed", network=self.network, cause=cause, error=str(exc))
        return TickReport(self.network, finalized, due=due, delayed=cause)

    def _publish_backlog(self) -> None:
        try:
            count, oldest = self.store.backlog(self.network)
        except Exception as exc:  # a metrics query must never stop the watcher
            log.warning("finality_backlog_unavailable", network=self.network, error=str(exc))
            return
        metrics.PENDING_DEPOSITS.labels(network=self.network).set(count)
        age = max(self._wall() - oldest, 0.0) if oldest is not None else 0.0
        metrics.OLDEST_PENDING_AGE.labels(network=self.network).set(age)
        credited_count = getattr(self.store, "credited_count", None)
        if credited_count is not None:
            try:
                metrics.CREDITED_DEPOSITS.labels(network=self.network).set(
                    credited_count(self.network))
            except Exception as exc:  # idem: metrics never stop the watcher
                log.warning("finality_credited_unavailable", network=self.network,
                            error=str(exc))

    def run(self, tick_seconds: float, stop: threading.Event) -> None:
        """Tick every `tick_seconds` until `stop` is set; a failing tick is logged and
        the next one tries again (the DB side's errors included)."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                self.tick()
            except Exception as exc:  # DB outage etc.: retry next tick, keep the thread
                log.error("finality_tick_failed", network=self.network, error=repr(exc))
            stop.wait(max(tick_seconds - (time.monotonic() - started), 0.0))


def rpc_for(settings: NetworkSettings, **overrides: Any) -> ChainRpc:
    """A ChainRpc for a NetworkSettings, its calls, errors and breaker in the metrics."""
    from paystream.finality.breaker import CircuitBreaker

    network = settings.network
    breaker = CircuitBreaker(f"rpc:{network}", settings.breaker,
                             on_change=metrics.breaker_gauge(network))
    options: dict[str, Any] = dict(
        timeout=settings.rpc_timeout, confirmations=settings.confirmations, breaker=breaker,
        finalized_ttl=settings.finalized_ttl,
        on_call=lambda m: metrics.RPC_CALLS.labels(network=network, method=m).inc(),
        on_error=lambda m: metrics.RPC_ERRORS.labels(network=network, method=m).inc())
    options.update(overrides)
    return ChainRpc(network, settings.rpc_url, **options)
