"""Test-only crash points of the sender, armed by environment variables
(SenderCrashHookSettings), inert otherwise (the consumer's are consumers/crash_hooks.py)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from pydantic import Field

from paystream.env import EnvSettings, variable_name


class SenderCrashHookSettings(EnvSettings):
    """Inert unless set; the tests and the chaos run use them."""

    doc_section = "Test hooks"

    crash_after_claim: int = Field(
        0, alias="PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_CLAIM", ge=0,
        json_schema_extra={"shown": "unset"},
        description="N: the sender SIGKILLs itself once the Nth delivery is claimed "
                    "(committed), before it is sent")
    crash_after_send: int = Field(
        0, alias="PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_SEND", ge=0,
        json_schema_extra={"shown": "unset"},
        description="N: the sender SIGKILLs itself once the Nth attempt is answered, before "
                    "the answer is recorded")


AFTER_CLAIM = variable_name(SenderCrashHookSettings, "crash_after_claim")
AFTER_SEND = variable_name(SenderCrashHookSettings, "crash_after_send")


@dataclass
class SenderCrashHooks:
    crash_after_claim: int = 0
    crash_after_send: int = 0
    _claimed: int = 0
    _answered: int = 0

    @classmethod
    def from_env(cls) -> SenderCrashHooks:
        settings = SenderCrashHookSettings.from_env()
        return cls(settings.crash_after_claim, settings.crash_after_send)

    def after_claim(self, claimed: int) -> None:
        before, self._claimed = self._claimed, self._claimed + claimed
        if self.crash_after_claim and before < self.crash_after_claim <= self._claimed:
            _die()

    def after_send(self) -> None:
        self._answered += 1
        if self._answered == self.crash_after_send:
            _die()


def _die() -> None:
    # SIGKILL, like kill -9: no finally blocks, no close(), no flush.
    os.kill(os.getpid(), signal.SIGKILL)
