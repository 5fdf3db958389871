"""Notification intents across a failover (docs/operations.md#cdc-across-a-failover).

The ledger writes an event's intent to the outbox in the batch that applies it, and
nothing stores the intent until the notifier records it (notification_intents). An
outbox row the old primary's slot had not shipped is lost with the slot while its
event is already `applied`, so the events republished (schema/republish.py) do not
bring it back. Here the intents of the outcomes the ledger recorded in the last
WINDOW_S seconds are made again from the stored event and outcome (intents.of_outcome:
the same intent id) and those the notifier has not recorded are published again. The
notifier is idempotent by intent id: one it did receive is absorbed.

What this does not rebuild: the details a batch alone knew (a shortfall's amount, a
reversal's debit, the invoices' notices, shortfall.opened): those intents are made
again without them, or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from paystream.notify import intents
from paystream.notify.seal import Sealer
from paystream.schema.db import Cursor
from paystream.schema.events import NOTIFICATIONS_AGGREGATE, parse_wire
from paystream.schema.outbox import publish
from paystream.schema.processed_events import Outcome

# The ledger's outcomes this far back: far beyond how long an intent waits between the
# ledger's commit and Debezium's confirmation (milliseconds to seconds).
WINDOW_S = 900


def remade(rows: Iterable[tuple[str, datetime | None, dict[str, Any], str]]
           ) -> dict[str, tuple[intents.Intent, str]]:
    """The intents the batches of these (outcome, processed_at, payload, trace_id) rows
    made, by id (pure: unit-tested). A chain deposit's outcome moves on when its
    settlement applies (pending_finality to applied, reorged, ...), but its batch told
    `deposit.pending`: that is the intent made again, never a `deposit.credited` it did
    not make (the settlement's own intent is the settlement's)."""
    made: dict[str, tuple[intents.Intent, str]] = {}
    for outcome, processed_at, payload, trace_id in rows:
        created = processed_at.astimezone(UTC) if isinstance(processed_at, datetime) \
            else datetime.now(UTC)
        event, recorded = parse_wire(payload), Outcome(outcome)
        if event.is_chain_deposit and not recorded.is_rejection:
            recorded = Outcome.PENDING_FINALITY
        intent = intents.of_outcome(
            event, recorded, created.isoformat(timespec="milliseconds").replace("+00:00", "Z"))
        if intent is not None:
            made[intent.id] = (intent, trace_id)
    return made


def missing_intents(cur: Cursor, sealer: Sealer, window_s: float = WINDOW_S) -> int:
    """Publish again, in the caller's transaction, the intents of the last `window_s`
    seconds' outcomes that the notifier has not recorded; how many."""
    cur.execute("SELECT p.outcome, p.processed_at, e.payload, e.trace_id"
                " FROM processed_events p JOIN payment_events e"
                "  ON e.event_id = p.event_id AND e.event_type = p.event_type"
                " WHERE p.processed_at > now() - make_interval(secs => %s)"
                " ORDER BY p.processed_at", (window_s,))
    made = remade(cur.fetchall())
    if not made:
        return 0
    cur.execute("SELECT intent_id FROM notification_intents WHERE intent_id = ANY(%s)",
                (list(made),))
    for (known,) in cur.fetchall():
        made.pop(known, None)
    by_user: dict[str, list[tuple[intents.Intent, str]]] = {}
    for intent, trace_id in made.values():
        by_user.setdefault(intent.user_id, []).append((intent, trace_id))
    # Keyed by user: each user's intents on one notification partition, in order.
    publish(cur, NOTIFICATIONS_AGGREGATE,
            [m for user, pairs in by_user.items()
             for m in intents.outbox_batches(pairs, f"republished-{user}", sealer)])
    return len(made)
