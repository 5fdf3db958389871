"""A last-resort liveness check for the consumer loop: crash-only recovery.

Every step of the loop is bounded (consume timeouts, the DLQ flush and commit budgets,
statement timeouts), but a client call that blocks without a bound (seen once: a
synchronous offset commit during a broker restart and rebalance) would stall its
partitions forever. The loop beats on every iteration; if it has not beaten for
`limit_s`, the watchdog dumps every thread's stack to stderr (so the hang can be
diagnosed) and exits the process. That is always safe here: nothing uncommitted is lost
(offsets move only after the DB commit), and a restarted consumer, or another member,
replays the batch as a no-op.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time

import structlog

log = structlog.get_logger("consumers.watchdog")

EXIT_WEDGED = 4


class Watchdog:
    def __init__(self, limit_s: float, group: str) -> None:
        self.limit_s = limit_s
        self.group = group
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def beat(self) -> None:
        self._last = time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(min(1.0, self.limit_s / 10))
            silent = time.monotonic() - self._last
            if silent > self.limit_s:
                log.critical("consumer_wedged", group=self.group, silent_s=round(silent, 1),
                             limit_s=self.limit_s, action="exit; offsets not committed are"
                             " redelivered and replay as no-ops")
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                sys.stderr.flush()
                os._exit(EXIT_WEDGED)
