"""A test-only ledger consequence: bonus points, a point per whole unit a deposit
credits, written in the ledger's batch transaction after the invoices' matching (by its
name alone it would run first: its `after` places it).

Declared here and nowhere else, as the product's features declare theirs
(paystream/ledger_consequences.py): `ledger_handler(also=("tests.support",))` finds it
under this package as `paystream consume ledger` finds the product's, so the tests that
use it prove that a new consequence needs its own module and nothing more. Its table is
the test's: made by the owner for the ledger's role to write (`made`), dropped after.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

from paystream.ledger_consequences import Declared
from paystream.schema.db import Connection, Cursor
from paystream.schema.events import EventType
from paystream.schema.pgarray import text_array
from paystream.schema.processed_events import Outcome

# A deposit of more than 100 earns more than the table admits: the consequence fails.
MOST_POINTS = 100


@contextmanager
def made(owner: Connection) -> Iterator[None]:
    """The feature's table, for the duration (`owner`: the owner's autocommit one)."""
    with owner.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS bonus_points")
        cur.execute("CREATE TABLE bonus_points (event_id TEXT PRIMARY KEY,"
                    " user_id TEXT NOT NULL,"
                    f" points INT NOT NULL CHECK (points <= {MOST_POINTS}))")
        cur.execute("GRANT SELECT, INSERT ON bonus_points TO paystream_ledger")
    try:
        yield
    finally:
        with owner.cursor() as cur:
            cur.execute("DROP TABLE bonus_points")


class BonusPoints:
    name = "bonus_points"

    def write(self, cur: Cursor, batch: Any) -> None:
        earned = [(c.event.event_id, c.event.user_id, int(c.event.amount // Decimal(1)))
                  for c, outcome in batch.plan.decisions
                  if outcome is Outcome.APPLIED and c.event.event_type is EventType.DEPOSIT]
        if earned:
            cur.execute("INSERT INTO bonus_points (event_id, user_id, points)"
                        " SELECT * FROM unnest(%s::text[], %s::text[], %s::int[])",
                        (text_array([e for e, _, _ in earned]),
                         text_array([u for _, u, _ in earned]), [p for _, _, p in earned]))


CONSEQUENCE = Declared("bonus_points", BonusPoints, after=("invoices",))
