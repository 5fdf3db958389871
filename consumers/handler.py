"""The one interface between the runtime and a consumer group's business logic.

A handler applies a batch of records with the cursor it is given, inside the
transaction the commit protocol owns: it never commits, rolls back or talks to Kafka.
Messages it cannot ever apply are returned as dead letters (or raised as PoisonError when
applying them one by one); everything else it writes is part of the batch transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from paystream.consumers.dlq import DeadLetter
from paystream.consumers.records import Record
from paystream.schema.db import Cursor


@dataclass
class BatchResult:
    dead_letters: list[DeadLetter] = field(default_factory=list)
    # Outcome label -> message count (applied, duplicate, insufficient_funds, ...).
    outcomes: Counter[str] = field(default_factory=Counter)

    def merge(self, other: BatchResult) -> None:
        self.dead_letters.extend(other.dead_letters)
        self.outcomes.update(other.outcomes)


class BatchHandler(Protocol):
    name: str

    def apply(self, cur: Cursor, records: Sequence[Record]) -> BatchResult:
        """Apply `records` (in offset order per partition) with `cur`; never commit."""
        ...
