"""What one delivery writes: the contract every provider implements, and the writing of
events and notices they share.

`DeliveryWrite` is the one contract between a provider's route and the group commit
(ingest.writer, ingest.store): ingest.payments.PaymentWrite and
ingest.alchemy.AlchemyWrite implement it.

All or nothing per delivery: every new event goes through schema.outbox (event row +
outbox row, or nothing when the id is known), every notice is recorded once, and a
conflicting duplicate raises ConflictingDuplicateError so the whole delivery rolls back.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from paystream.ingest.errors import ConflictingDuplicateError, IngestError
from paystream.ingest.notices import Notice, NoticeKind, notice_id
from paystream.ingest.refusals import Refusal
from paystream.schema.chain import BLOCK_FIELDS, scanned_same_transfer
from paystream.schema.db import Cursor
from paystream.schema.events import PaymentEvent
from paystream.schema.outbox import WriteOutcome, write_event


@dataclass
class Recorded:
    """What a delivery did, for the answer, the metrics and the logs."""

    events: list[tuple[str, WriteOutcome]] = field(default_factory=list)
    notices_new: list[Notice] = field(default_factory=list)
    notices_known: int = 0
    # Set when the delivery was refused as not applicable (ingest.refusals): the refusal
    # was recorded and nothing else written; the route answers it 422. A result, not an
    # IngestError, because an error would roll the delivery's savepoint, and with it the
    # record of the refusal, back.
    refused: Refusal | None = None
    refused_event_id: str | None = None  # the event the refusal names

    @property
    def wrote_anything(self) -> bool:
        return bool(self.notices_new) or any(o is WriteOutcome.ACCEPTED
                                             for _, o in self.events)


class DeliveryWrite(ABC):
    """One delivery's database work, as the group commit runs it.

    ingest.store.EventStore.commit_group runs a group of deliveries in ONE transaction.
    Consecutive deliveries of one class form a run, handed to that class's
    `write_together` inside one SAVEPOINT. It returns each delivery's outcome in order
    (a Recorded, or the IngestError it is answered with) and must give exactly the
    outcomes of `write` called for each alone, in its own savepoint. If it raises
    instead (a conflict after partial writes, a row the database refuses, a bug), the
    store rolls the run back to its savepoint and calls `write` for each delivery in a
    savepoint of its own.

    `write` raises an IngestError (ConflictingDuplicateError: 409) to have its delivery rolled back
    and answered with it; a delivery refused with a record of the refusal kept returns
    a Recorded whose `refused` is set (ingest.refusals). A database error that means
    "the database cannot answer now" fails the whole group (503).
    """

    __slots__ = ()

    @abstractmethod
    def write(self, cur: Cursor) -> Recorded:
        """Write this delivery alone, in the savepoint the store opened for it."""

    @classmethod
    @abstractmethod
    def write_together(cls, cur: Cursor, writes: Sequence[Self]
                       ) -> list[Recorded | IngestError]:
        """Write `writes` (all of this class), with the outcomes of writing each alone."""

    def __call__(self, cur: Cursor) -> Recorded:
        # A delivery is also a plain unit of work for the store (ingest.store.Work).
        return self.write(cur)


def record(cur: Cursor, events: Iterable[PaymentEvent], notices: Iterable[Notice],
           trace_id: str, *, chain_events: bool) -> Recorded:
    done = Recorded()
    notices = list(notices)
    for event in events:
        outcome = write_event(cur, event, trace_id)
        if outcome is WriteOutcome.CONFLICT and chain_events and _scanned(cur, event):
            outcome = WriteOutcome.DUPLICATE
        if outcome is WriteOutcome.CONFLICT:
            reorg = _reorg_notice(cur, event) if chain_events else None
            if reorg is None:
                raise ConflictingDuplicateError(
                    f"event {event.event_id} was already received with different content",
                    event_id=event.event_id)
            # The same transfer in another block: a reorg, not a conflict. The first
            # event stands; the notice tells the finality work what moved.
            notices.append(reorg)
            continue
        done.events.append((event.event_id, outcome))
    for notice in notices:
        if _insert_notice(cur, notice, trace_id):
            done.notices_new.append(notice)
        else:
            done.notices_known += 1
    return done


def _insert_notice(cur: Cursor, notice: Notice, trace_id: str) -> bool:
    cur.execute(
        "INSERT INTO ingest_notices (notice_id, provider, kind, reason, event_id,"
        " delivery_id, trace_id, detail) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
        " ON CONFLICT (notice_id) DO NOTHING RETURNING notice_id",
        (notice.notice_id, notice.provider, notice.kind.value, notice.reason,
         notice.event_id, notice.delivery_id, trace_id,
         json.dumps(notice.detail, separators=(",", ":"), default=str)),
    )
    return cur.fetchone() is not None


def _scanned(cur: Cursor, event: PaymentEvent) -> bool:
    """The chain scanner recorded this very transfer first: the provider's report of it
    is a duplicate (schema.chain.scanned_same_transfer), not a conflict."""
    cur.execute("SELECT payload FROM payment_events WHERE event_id = %s", (event.event_id,))
    row = cur.fetchone()
    return row is not None and scanned_same_transfer(row[0], event.to_wire())


def _reorg_notice(cur: Cursor, event: PaymentEvent) -> Notice | None:
    """A notice if the stored event differs from `event` only in its block; else None."""
    cur.execute("SELECT payload FROM payment_events WHERE event_id = %s", (event.event_id,))
    row = cur.fetchone()
    if row is None:
        return None
    stored, new = row[0], event.to_wire()
    if (_without_block(stored) != _without_block(new)
            and not scanned_same_transfer(stored, new, any_block=True)):
        return None
    detail = {"previous_chain": stored.get("chain"), "chain": new.get("chain")}
    return Notice(notice_id=notice_id(event.provider, NoticeKind.REORG,
                                      {"event_id": event.event_id, "chain": new.get("chain")}),
                  provider=event.provider, kind=NoticeKind.REORG, reason="block_changed",
                  detail=detail, event_id=event.event_id)


def _without_block(wire: dict[str, Any]) -> dict[str, Any]:
    chain = {k: v for k, v in (wire.get("chain") or {}).items() if k not in BLOCK_FIELDS}
    return {**wire, "chain": chain}
