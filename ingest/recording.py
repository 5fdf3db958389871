"""What one delivery writes, inside the single transaction EventStore.run gives it.

All or nothing per delivery: every new event goes through schema.outbox.write_event
(event row + outbox row, or nothing when the id is known), every notice is recorded
once, and a conflicting duplicate raises ConflictError so the whole delivery rolls back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg2.extensions

from paystream.ingest import alchemy
from paystream.ingest.errors import ConflictError
from paystream.ingest.notices import Notice, NoticeKind, notice_id
from paystream.schema.events import PaymentEvent
from paystream.schema.outbox import WriteOutcome, write_event

Cursor = psycopg2.extensions.cursor
# Block coordinates may change when a reorg re-mines a transfer; nothing else may.
BLOCK_FIELDS = ("block_number", "block_hash", "removed")


@dataclass
class Recorded:
    """What a delivery did, for the answer, the metrics and the logs."""

    events: list[tuple[str, WriteOutcome]] = field(default_factory=list)
    notices_new: list[Notice] = field(default_factory=list)
    notices_known: int = 0

    @property
    def wrote_anything(self) -> bool:
        return bool(self.notices_new) or any(o is WriteOutcome.ACCEPTED
                                             for _, o in self.events)


def record_payment(cur: Cursor, event: PaymentEvent, trace_id: str) -> Recorded:
    return record(cur, [event], [], trace_id, chain_events=False)


def record_alchemy(cur: Cursor, delivery: alchemy.AlchemyDelivery,
                   trace_id: str) -> Recorded:
    owners = deposit_owners(cur, delivery.network, delivery.addresses())
    classified = alchemy.classify(delivery, owners)
    return record(cur, classified.events, classified.notices, trace_id, chain_events=True)


def deposit_owners(cur: Cursor, network: str | None, addresses: Sequence[str]
                   ) -> dict[str, str]:
    """Lowercased deposit address -> user id, for the addresses of one delivery."""
    if network is None or not addresses:
        return {}
    cur.execute("SELECT address, user_id FROM deposit_addresses"
                " WHERE network = %s AND address = ANY(%s)", (network, list(addresses)))
    return dict(cur.fetchall())


def record(cur: Cursor, events: Iterable[PaymentEvent], notices: Iterable[Notice],
           trace_id: str, *, chain_events: bool) -> Recorded:
    done = Recorded()
    notices = list(notices)
    for event in events:
        outcome = write_event(cur, event, trace_id)
        if outcome is WriteOutcome.CONFLICT:
            reorg = _reorg_notice(cur, event) if chain_events else None
            if reorg is None:
                raise ConflictError(
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


def _reorg_notice(cur: Cursor, event: PaymentEvent) -> Notice | None:
    """A notice if the stored event differs from `event` only in its block; else None."""
    cur.execute("SELECT payload FROM payment_events WHERE event_id = %s", (event.event_id,))
    row = cur.fetchone()
    if row is None:
        return None
    stored, new = row[0], event.to_wire()
    if _without_block(stored) != _without_block(new):
        return None
    detail = {"previous_chain": stored.get("chain"), "chain": new.get("chain")}
    return Notice(notice_id=notice_id(event.provider, NoticeKind.REORG,
                                      {"event_id": event.event_id, "chain": new.get("chain")}),
                  provider=event.provider, kind=NoticeKind.REORG, reason="block_changed",
                  detail=detail, event_id=event.event_id)


def _without_block(wire: dict[str, Any]) -> dict[str, Any]:
    chain = {k: v for k, v in (wire.get("chain") or {}).items() if k not in BLOCK_FIELDS}
    return {**wire, "chain": chain}
