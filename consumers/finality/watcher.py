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
from typing import Protocol

import structlog

from consumers.finality import metrics
from consumers.finality.breaker import CircuitOpenError
from consumers.finality.evidence import BlockRef
from consumers.finality.planner import check
from consumers.finality.rpc import ChainRpc, RpcError
from consumers.finality.verify import ExpectedDeposit, Outcome, Verdict, not_yet

log = structlog.get_logger("paystream.finality")


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
    def record(self, network: str, decided: Sequence[tuple[ExpectedDeposit, Verdict]]
               ) -> None:
        """Write one outbox event per decided deposit, all in one DB transaction.
        Only FINAL and REORGED verdicts are passed."""
        ...


@dataclass(frozen=True)
class TickReport:
    network: str
    finalized: BlockRef | None
    due: int = 0
    final: int = 0
    reorged: int = 0
    not_yet: int = 0
    delayed: str | None = None  # why nothing was decided (rpc error, breaker open)
    seconds: float = 0.0


class FinalityWatcher:
    def __init__(self, rpc: ChainRpc, store: PendingStore, sink: OutcomeSink, *,
                 limit: int = 10_000, wall_clock: Callable[[], float] = time.time,
                 reorg_grace_blocks: int = 0) -> None:
        self.rpc = rpc
        self.network = rpc.network
        self.store = store
        self.sink = sink
        self.limit = limit
        self.reorg_grace_blocks = reorg_grace_blocks
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
        except (RpcError, CircuitOpenError) as exc:
            return self._delayed(None, exc)
        metrics.FINALIZED_BLOCK.labels(network=self.network).set(finalized.number)
        due = self.store.due(self.network, finalized.number, self.limit)
        if not due:
            return TickReport(self.network, finalized)
        try:
            verdicts = check(self.rpc, due, finalized.number)
        except (RpcError, CircuitOpenError) as exc:
            return self._delayed(finalized, exc, due=len(due))
        verdicts = [(d, self._graced(d, v, finalized.number)) for d, v in verdicts]
        decided = [(d, v) for d, v in verdicts if v.outcome is not Outcome.NOT_YET]
        if decided:
            self.sink.record(self.network, decided)
        final = reorged = 0
        for deposit, verdict in decided:
            if verdict.outcome is Outcome.FINAL:
                final += 1
                metrics.FINALISATIONS.labels(network=self.network,
                                             moved=str(verdict.moved).lower()).inc()
            else:
                reorged += 1
                metrics.REORGS.labels(network=self.network, reason=verdict.reason).inc()
                log.warning("deposit_reorged", network=self.network,
                            event_id=deposit.event_id, tx_hash=deposit.tx_hash,
                            block_number=deposit.block_number, reason=verdict.reason)
        return TickReport(self.network, finalized, due=len(due), final=final,
                          reorged=reorged, not_yet=len(due) - final - reorged)

    def _graced(self, deposit: ExpectedDeposit, verdict: Verdict, finalized: int) -> Verdict:
        if (verdict.outcome is Outcome.REORGED and verdict.reason == "tx_not_in_chain"
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


def rpc_for(settings, **overrides) -> ChainRpc:
    """A ChainRpc for a NetworkSettings, its calls, errors and breaker in the metrics."""
    from consumers.finality.breaker import CircuitBreaker

    network = settings.network
    breaker = CircuitBreaker(f"rpc:{network}", settings.breaker,
                             on_change=metrics.breaker_gauge(network))
    options = dict(timeout=settings.rpc_timeout, confirmations=settings.confirmations,
                   breaker=breaker, finalized_ttl=settings.finalized_ttl,
                   on_call=lambda m: metrics.RPC_CALLS.labels(network=network,
                                                              method=m).inc(),
                   on_error=lambda m: metrics.RPC_ERRORS.labels(network=network,
                                                                method=m).inc())
    options.update(overrides)
    return ChainRpc(network, settings.rpc_url, **options)
