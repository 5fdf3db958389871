"""Test-only crash points, armed by environment variables and inert otherwise.

PAYSTREAM_TEST_CRASH_AFTER_DB_COMMIT=N  SIGKILL after the Nth batch's DB commit, before
                                        its offsets are committed (the window a crash
                                        between the two commits opens).
PAYSTREAM_TEST_CRASH_BEFORE_DB_COMMIT=N SIGKILL with the Nth batch applied but not yet
                                        committed (a consumer killed mid-batch).
PAYSTREAM_TEST_PAUSE_BEFORE_DB_COMMIT=N:S  sleep S seconds with the Nth batch applied
                                        but not committed (a signal that arrives
                                        mid-batch, on purpose).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from paystream.env import env_int

AFTER_DB_COMMIT = "PAYSTREAM_TEST_CRASH_AFTER_DB_COMMIT"
BEFORE_DB_COMMIT = "PAYSTREAM_TEST_CRASH_BEFORE_DB_COMMIT"
PAUSE_BEFORE_DB_COMMIT = "PAYSTREAM_TEST_PAUSE_BEFORE_DB_COMMIT"


@dataclass
class CrashHooks:
    crash_after_db_commit: int = 0
    crash_before_db_commit: int = 0
    pause_before_db_commit: tuple[int, float] = (0, 0.0)
    _commits: int = 0
    _applies: int = 0

    @classmethod
    def from_env(cls) -> CrashHooks:
        batch, _, seconds = os.environ.get(PAUSE_BEFORE_DB_COMMIT, "0:0").partition(":")
        return cls(env_int(AFTER_DB_COMMIT, 0), env_int(BEFORE_DB_COMMIT, 0),
                   (int(batch), float(seconds or 0)))

    def before_db_commit(self) -> None:
        self._applies += 1
        if self._applies == self.crash_before_db_commit:
            _die()
        if self._applies == self.pause_before_db_commit[0]:
            # time.sleep resumes after a signal handler returns (PEP 475): the batch
            # goes on to its commit, as one whose apply was slow would.
            time.sleep(self.pause_before_db_commit[1])

    def after_db_commit(self) -> None:
        self._commits += 1
        if self._commits == self.crash_after_db_commit:
            _die()


def _die() -> None:
    # SIGKILL, like kill -9: no finally blocks, no close(), no flush.
    os.kill(os.getpid(), signal.SIGKILL)
