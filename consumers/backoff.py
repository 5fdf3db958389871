"""Jittered exponential backoff for retrying a batch after a transient failure."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delay n is uniform in [cap/2, cap] with cap = min(maximum, initial * 2**n).

    Half the cap is kept as a floor so a retry storm cannot hammer a recovering
    database; the other half is random so many consumers do not retry in lockstep.
    """

    initial_s: float = 0.2
    maximum_s: float = 10.0
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def cap(self, attempt: int) -> float:
        # Bound the exponent: 2**1000 overflows a float long before the cap matters.
        return min(self.maximum_s, self.initial_s * 2.0 ** min(attempt, 60))

    def next_delay(self) -> float:
        cap = self.cap(self.attempt)
        self.attempt += 1
        return cap / 2 + self.rng.uniform(0, cap / 2)

    def reset(self) -> None:
        self.attempt = 0
