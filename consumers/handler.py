"""The one interface between the runtime and a consumer group's business logic.

A handler applies a batch of records with the cursor it is given, inside the
transaction the commit protocol owns: it never commits, rolls back or talks to Kafka.
Messages it cannot ever apply are returned as dead letters (or raised as PoisonError when
applying them one by one); everything else it writes is part of the batch transaction.

The runtime calls exactly the methods declared on BatchHandler, and nothing else: a
handler with no work for a hook implements it as an explicit no-op.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from paystream.consumers.dead_letters.send import DeadLetter
from paystream.consumers.records import Record
from paystream.schema.db import Connection, Cursor, DbRole


@dataclass
class BatchResult:
    dead_letters: list[DeadLetter] = field(default_factory=list)
    # Outcome label -> message count (applied, duplicate, insufficient_funds, ...).
    outcomes: Counter[str] = field(default_factory=Counter)
    # Set by the commit protocol, not by handlers: the index of the first record left
    # unapplied because it would have been one unexpected failure over the DLQ limit
    # (commit.py); that record and every one after it are not part of the batch.
    cut: int | None = None
    # Why it was cut (counts per reason, the first failure), for the group's stop.
    cut_cause: str = ""

    def merge(self, other: BatchResult) -> None:
        self.dead_letters.extend(other.dead_letters)
        self.outcomes.update(other.outcomes)


class BatchHandler(Protocol):
    # The consumer group's role, for logs (`ledger`, `dlq-mirror`).
    name: str
    # The database role it connects as (schema.db.ROLE_NAMES): `ledger`, `mirror`.
    db_role: DbRole

    def apply(self, cur: Cursor, records: Sequence[Record]) -> BatchResult:
        """Apply `records` (in offset order per partition) with `cur`; never commit.

        Called by the commit protocol (consumers/commit.py, steps 1-2) once per polled
        batch, inside the open batch transaction; called again with one record at a
        time, each under a SAVEPOINT, if the whole batch raised a deterministic error.
        It may read and write through `cur` and return dead letters; it must not commit,
        roll back, or produce to Kafka. What it raises is classified (failures.py): a
        transient error rolls the batch back for a later retry, a deterministic one
        makes the protocol isolate the message that fails alone, a fatal one stops the
        consumer.
        """
        ...

    def after_batch(self, connection: Callable[[], Connection]) -> None:
        """Periodic work between batches (checks, gauges), outside any batch.

        Called by the runtime on every loop iteration, with or without records (after
        the batch, if one came, was committed), but never while a failed batch is being
        retried. `connection()` returns the consumer's connection, reopened if it broke,
        with no transaction open; whatever it opens must be ended before returning. It
        runs on the poll thread, so it must be quick (max.poll.interval.ms keeps
        counting) and rate-limit itself. It must not raise: it logs and swallows its
        own failures, since an exception here would end the consumer process.
        """
        ...
