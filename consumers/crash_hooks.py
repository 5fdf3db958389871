"""Test-only crash points of the consumer, armed by environment variables
(CrashHookSettings) and inert otherwise."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from pydantic import Field

from paystream.env import EnvSettings, SettingsError, variable_name


class CrashHookSettings(EnvSettings):
    """Inert unless set; the tests and the chaos run use them."""

    doc_section = "Test hooks"

    crash_after_db_commit: int = Field(
        0, alias="PAYSTREAM_TEST_CRASH_AFTER_DB_COMMIT", ge=0,
        json_schema_extra={"shown": "unset"},
        description="N: the consumer SIGKILLs itself after the Nth batch's DB commit, before "
                    "its offset commit (the window a crash between the two commits opens)")
    crash_before_db_commit: int = Field(
        0, alias="PAYSTREAM_TEST_CRASH_BEFORE_DB_COMMIT", ge=0,
        json_schema_extra={"shown": "unset"},
        description="N: the consumer SIGKILLs itself with the Nth batch applied, not "
                    "committed")
    pause_before_db_commit: str = Field(
        "0:0", alias="PAYSTREAM_TEST_PAUSE_BEFORE_DB_COMMIT",
        json_schema_extra={"shown": "unset"},
        description="N:S: the consumer sleeps S seconds with the Nth batch applied, not "
                    "committed (a signal that arrives mid-batch)")

    def pause(self) -> tuple[int, float]:
        batch, _, seconds = self.pause_before_db_commit.partition(":")
        try:
            return int(batch), float(seconds or 0)
        except ValueError:
            raise SettingsError(f"{PAUSE_BEFORE_DB_COMMIT} must be N:S, got "
                                f"{self.pause_before_db_commit!r}") from None


AFTER_DB_COMMIT = variable_name(CrashHookSettings, "crash_after_db_commit")
BEFORE_DB_COMMIT = variable_name(CrashHookSettings, "crash_before_db_commit")
PAUSE_BEFORE_DB_COMMIT = variable_name(CrashHookSettings, "pause_before_db_commit")


@dataclass
class CrashHooks:
    crash_after_db_commit: int = 0
    crash_before_db_commit: int = 0
    pause_before_db_commit: tuple[int, float] = (0, 0.0)
    _commits: int = 0
    _applies: int = 0

    @classmethod
    def from_env(cls) -> CrashHooks:
        settings = CrashHookSettings.from_env()
        return cls(settings.crash_after_db_commit, settings.crash_before_db_commit,
                   settings.pause())

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
