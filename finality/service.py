"""`paystream consume finality`: one watcher thread per network, until SIGTERM/SIGINT.

Each network gets its own RPC client (timeouts, breaker, finalized cache: rpc.py), its
own DB connection (store.py) and its own tick loop (watcher.py). A failing tick (RPC
outage, DB outage) is logged and retried at the next tick; the process only stops on a
signal. Metrics (metrics.py) are served on --metrics-port (default 9404; the health
exporter has 9403).
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from paystream.finality.settings import NetworkSettings
from paystream.finality.store import ChainDepositStore
from paystream.finality.watcher import FinalityWatcher, rpc_for

log = structlog.get_logger("paystream.finality")
DEFAULT_METRICS_PORT = 9404


def watcher_for(settings: NetworkSettings, store: ChainDepositStore | None = None
                ) -> FinalityWatcher:
    store = store or ChainDepositStore()
    return FinalityWatcher(rpc_for(settings), store, store, limit=settings.batch_limit,
                           reorg_grace_blocks=settings.reorg_grace_blocks,
                           credit_depth=settings.credit_depth)


def run(networks: Sequence[NetworkSettings], stop: threading.Event | None = None) -> int:
    loops: list[tuple[str, Loop]] = []
    for settings in networks:
        watcher = watcher_for(settings)
        log.info("finality_watcher_started", network=settings.network,
                 rpc_url=settings.rpc_url, tick_seconds=settings.tick_seconds,
                 confirmations=settings.confirmations,
                 reorg_grace_blocks=settings.reorg_grace_blocks,
                 credit_depth=settings.credit_depth)
        loops.append((f"finality-{settings.network}",
                      functools.partial(watcher.run, settings.tick_seconds)))
    return run_threads(loops, "finality_stopping", stop)


Loop = Callable[[threading.Event], None]


def run_threads(loops: Sequence[tuple[str, Loop]], stopping: str,
                stop: threading.Event | None = None) -> int:
    """Each (thread name, loop) on a thread of its own until SIGTERM/SIGINT (logged as
    `stopping`) or `stop`; every loop returns once `stop` is set."""
    stop = stop or threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info(stopping, signal=signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    threads = [threading.Thread(target=loop, args=(stop,), name=name, daemon=True)
               for name, loop in loops]
    for thread in threads:
        thread.start()
    while not stop.is_set():
        stop.wait(1.0)
    for thread in threads:
        thread.join(timeout=30)
    return 0
