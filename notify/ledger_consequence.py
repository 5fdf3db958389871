"""Notification intents, the last consequence of the ledger's batch
(consumers/ledger/consequences.py): one per user-visible change planned in the batch
transaction (intents.py says which), a shortfall.opened per shortfall, and what earlier
consequences told (the invoices' notices), all in ONE outbox round trip: a record per
source partition (key `<topic>-<partition>`, so a user's intents always take the same
notification partition, in order). Only events planned here: a redelivered event was
dropped as a duplicate before step 8 and notifies nobody twice. Also the notice of a
shortfall a person resolved (shortfall_resolved), written in the resolution's
transaction.

Typed by what it reads (Protocols below), so the ledger and this module import
nothing of each other. Declared below (CONSEQUENCE) to run last, after every other
consequence (paystream/ledger_consequences.py): it sends what they told; its sealer is
made once, at start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Protocol

from paystream.ledger_consequences import Declared
from paystream.notify import intents
from paystream.notify.seal import Sealer, process_sealer
from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor
from paystream.schema.events import NOTIFICATIONS_AGGREGATE, PaymentEvent, SettlementType
from paystream.schema.outbox import publish
from paystream.schema.processed_events import Outcome

ZERO = Decimal(0)


class Decided(Protocol):
    @property
    def event(self) -> PaymentEvent: ...
    @property
    def trace_id(self) -> str | None: ...
    @property
    def source(self) -> tuple[str, int]: ...


class Planned(Protocol):
    @property
    def decisions(self) -> Sequence[tuple[Decided, Outcome]]: ...
    @property
    def shortfalls(self) -> Sequence[tuple[Decided, Decimal]]: ...


class Batch(Protocol):
    @property
    def plan(self) -> Planned: ...
    @property
    def created_at(self) -> str: ...
    @property
    def told(self) -> list[tuple[Any, object]]: ...


class Notifications:
    name = "notifications"

    def __init__(self, sealer: Sealer) -> None:
        self.sealer = sealer

    def write(self, cur: Cursor, batch: Batch) -> None:
        created_at = batch.created_at
        owed = {id(c): amount for c, amount in batch.plan.shortfalls}
        by_source: dict[tuple[str, int], list[tuple[intents.Intent, str]]] = {}
        for c, outcome in batch.plan.decisions:
            event = c.event
            short = owed.get(id(c), ZERO)
            extra: dict[str, object] = {}
            if event.event_type is SettlementType.DEPOSIT_REVERSED:
                extra = {"reason": (event.chain or {}).get("reason"),
                         "debited": format_amount(event.amount - short)
                         if event.amount > short else "0"}
            if short > 0:
                extra["shortfall"] = format_amount(short)
                extra["account_flagged"] = True
            intent = intents.of_outcome(event, outcome, created_at, **extra)
            if intent is not None:
                by_source.setdefault(c.source, []).append(
                    (intent, c.trace_id or event.event_id))
            if short > 0:
                by_source.setdefault(c.source, []).append((intents.new_intent(
                    intents.IntentType.SHORTFALL_OPENED, event.event_id, event.user_id,
                    event_type=event.event_type.value, asset=event.asset, amount=short,
                    created_at=created_at, reference=event.reference or event.settles),
                    c.trace_id or event.event_id))
        for c, told in batch.told:
            if not isinstance(told, intents.Intent):
                raise TypeError("a consequence told something that is not an intent:"
                                f" {type(told).__name__}")
            by_source.setdefault(c.source, []).append((told, c.trace_id or c.event.event_id))
        publish(cur, NOTIFICATIONS_AGGREGATE,
                [message for (topic, partition), batch_of in sorted(by_source.items())
                 for message in intents.outbox_batches(batch_of, f"{topic}-{partition}",
                                                       self.sealer)])


def _at_start_up() -> Notifications:
    """Built once, when the ledger starts: the process's sealer (its keys read now)."""
    return Notifications(process_sealer())


CONSEQUENCE = Declared("notifications", _at_start_up, last=True)


class ResolvedShortfall(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def user_id(self) -> str: ...
    @property
    def asset(self) -> str: ...
    @property
    def amount(self) -> Decimal: ...
    @property
    def source_event_id(self) -> str: ...
    @property
    def resolution(self) -> str | None: ...


def tell_shortfall_resolved(cur: Cursor, resolved: ResolvedShortfall,
                            still_flagged: bool) -> None:
    """shortfall_resolved sealed with this process's sealer, read when it tells: the
    `tell` the doors (`paystream shortfalls resolve`, the console's ledger page) hand the
    ledger's consumers/ledger/shortfalls.py resolve()."""
    shortfall_resolved(cur, resolved, still_flagged, process_sealer())


def shortfall_resolved(cur: Cursor, resolved: ResolvedShortfall, still_flagged: bool,
                       sealer: Sealer) -> None:
    """Tell the user a shortfall was resolved, in the resolution's transaction."""
    intent = intents.new_intent(
        intents.IntentType.SHORTFALL_RESOLVED, resolved.source_event_id,
        resolved.user_id, event_type="shortfall_resolved", asset=resolved.asset,
        amount=resolved.amount, created_at=intents.now_text(),
        shortfall_id=resolved.id, resolution=resolved.resolution,
        account_flagged=still_flagged)
    publish(cur, NOTIFICATIONS_AGGREGATE,
            intents.outbox_batches([(intent, resolved.source_event_id)], intent.user_id,
                                   sealer))
