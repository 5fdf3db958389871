"""`paystream consume finality`: one watcher thread per network, until SIGTERM/SIGINT.

Each network gets its own RPC client (timeouts, breaker, finalized cache: rpc.py), its
own DB connection (store.py) and its own tick loop (watcher.py). A failing tick (RPC
outage, DB outage) is logged and retried at the next tick; the process only stops on a
signal. Metrics (metrics.py) are served on --metrics-port (default 9404; the health
exporter has 9403).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
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
    stop = stop or threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("finality_stopping", signal=signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    threads = []
    for settings in networks:
        watcher = watcher_for(settings)
        log.info("finality_watcher_started", network=settings.network,
                 rpc_url=settings.rpc_url, tick_seconds=settings.tick_seconds,
                 confirmations=settings.confirmations,
                 reorg_grace_blocks=settings.reorg_grace_blocks,
                 credit_depth=settings.credit_depth)
        thread = threading.Thread(target=watcher.run, args=(settings.tick_seconds, stop),
                                  name=f"finality-{settings.network}", daemon=True)
        thread.start()
        threads.append(thread)
    while not stop.is_set():
        stop.wait(1.0)
    for thread in threads:
        thread.join(timeout=30)
    return 0
