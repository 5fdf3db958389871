"""What other features do with a ledger batch, in its transaction: the consequences.

The ledger plans and writes money (handler.py steps 1-7, and the statuses, holds,
reversals and shortfalls of its own books). A feature that reacts to the money moved
(chain deposits, invoices, notifications) is a Consequence, declared in its own folder
(a `*_consequence` module: paystream/ledger_consequences.py), found, ordered and built
at start-up (paystream/consume.py `ledger_handler`), handed to the handler and run at
step 8, in its declared order, in the batch transaction: if one raises, the whole batch
rolls back, offsets do not move, and the batch is applied again
(tests/integration/test_ledger_consequences.py). So the ledger imports no feature (the
import contract in .importlinter says so), and a new reaction to payments is a module of
its own feature that no other file names.

A consequence sees only events planned in this transaction (a redelivery was dropped as
a duplicate at step 6): nothing it writes happens twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from paystream.consumers.ledger.plan import Candidate, Plan
from paystream.schema.db import Cursor


@dataclass
class AppliedBatch:
    """What step 8 hands each consequence: the batch's plan (its decisions, in batch
    order, with the shortfalls planned), the moment its notices are stamped with, and
    `told`: what earlier consequences have to tell users, for a later one (the
    notifications) to send in the batch's one outbox round trip, each with the
    candidate that caused it."""

    plan: Plan
    created_at: str
    told: list[tuple[Candidate, object]] = field(default_factory=list)


class Consequence(Protocol):
    name: str

    def write(self, cur: Cursor, batch: AppliedBatch) -> None:
        """Write this feature's effect of the batch, in `cur`'s transaction."""
