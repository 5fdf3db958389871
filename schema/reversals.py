"""event_reversals: what refunds, chargebacks and reverts took back (migration 0009),
and the originals they name. Written by the ledger in its batch transaction."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor
from paystream.schema.events import EventError, PaymentEvent, parse_wire


@dataclass(frozen=True, slots=True)
class Original:
    """An event a reversal names: as stored, with its status and what earlier reversals
    took back of it."""

    event: PaymentEvent
    status: str
    reversed_so_far: Decimal

    @property
    def remaining(self) -> Decimal:
        return self.event.amount - self.reversed_so_far


def originals(cur: Cursor, event_ids: Iterable[str]) -> dict[str, Original]:
    """The stored events among `event_ids` (payload, status) with their reversed sums."""
    wanted = sorted(set(event_ids))
    if not wanted:
        return {}
    cur.execute(
        "SELECT p.event_id, p.payload, s.status, coalesce((SELECT sum(r.amount)"
        " FROM event_reversals r WHERE r.reverses = p.event_id), 0)"
        " FROM payment_events p JOIN event_status s USING (event_id)"
        " WHERE p.event_id = ANY(%s)", (wanted,))
    found: dict[str, Original] = {}
    for event_id, payload, status, so_far in cur.fetchall():
        try:
            found[event_id] = Original(parse_wire(payload), status, so_far)
        except EventError:  # a stored row the contract no longer reads: not reversible
            continue
    return found


def record(cur: Cursor, rows: Sequence[tuple[str, str, Decimal]]) -> None:
    """(reversal event id, original event id, amount) each; a replay is left as it is."""
    if not rows:
        return
    cur.executemany("INSERT INTO event_reversals (event_id, reverses, amount)"
                    " VALUES (%s, %s, %s) ON CONFLICT (event_id) DO NOTHING",
                    [(e, r, format_amount(a)) for e, r, a in rows])
