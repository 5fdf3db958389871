"""What an attempt's answer means, and when the next attempt is due: pure rules.

  2xx                 delivered
  408, 429, 5xx, 3xx  retried (a redirect is not followed: the endpoint's URL is the
                      operator's to change), as is no answer at all (timeout, refused)
  other 4xx           failed for good: the receiver refuses this message, and a retry
                      would be refused the same way
After the last delay of the schedule the slot fails for good too.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from enum import StrEnum


class Verdict(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    REFUSED = "refused"


def judge(status_code: int | None) -> Verdict:
    """The verdict on an attempt answered with `status_code` (None: no answer)."""
    if status_code is None:
        return Verdict.RETRY
    if 200 <= status_code < 300:
        return Verdict.DELIVERED
    if 400 <= status_code < 500 and status_code not in (408, 429):
        return Verdict.REFUSED
    return Verdict.RETRY


def retry_delay(attempts: int, delays_s: Sequence[float], jitter: float,
                rng: random.Random | None = None) -> float | None:
    """Seconds until the next attempt after `attempts` failed ones (1 = the first
    failed), jittered by up to +-`jitter`; None once the schedule is spent."""
    if attempts < 1 or attempts > len(delays_s):
        return None
    base = delays_s[attempts - 1]
    spread = (rng or random).uniform(-jitter, jitter)
    return max(0.0, base * (1 + spread))
