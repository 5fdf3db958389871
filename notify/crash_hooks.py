"""Test-only crash points of the sender, armed by environment variables, inert otherwise
(the consumer's are consumers/crash_hooks.py).

PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_CLAIM=N  SIGKILL once the Nth slot is claimed (the claim
                                           committed), before it is sent
PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_SEND=N   SIGKILL once the Nth attempt was answered,
                                           before the answer is recorded
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from paystream.env import env_int

AFTER_CLAIM = "PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_CLAIM"
AFTER_SEND = "PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_SEND"


@dataclass
class SenderCrashHooks:
    crash_after_claim: int = 0
    crash_after_send: int = 0
    _claimed: int = 0
    _answered: int = 0

    @classmethod
    def from_env(cls) -> SenderCrashHooks:
        return cls(env_int(AFTER_CLAIM, 0), env_int(AFTER_SEND, 0))

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
