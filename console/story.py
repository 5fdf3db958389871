"""An event's whole story, for the console's event page: the stored body as the provider
sent it, what the ledger decided, the transfer and its postings, the chain deposit, the
dead letters and Kafka records, the notifications and their attempts, and a timeline.

Every read is by a primary key or an index (the ledger's idempotency keys, the intents'
ids and the transfers' keys are derived from the event id, as the writers derive them),
so the page costs the same on a table of a million events as on an empty one."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from paystream.notify.intents import IntentType, intent_id
from paystream.schema.db import Cursor
from paystream.schema.events import EventType
from paystream.schema.idempotency import idempotency_key

EVENT_COLUMNS = ("event_id", "provider", "event_type", "user_id", "asset", "amount",
                 "status", "content_hash", "trace_id", "received_at", "status_changed_at")
DLQ_COLUMNS = ("id", "status", "error_reason", "error_detail", "source_topic",
               "source_partition", "source_offset", "first_seen_at", "discard_reason")


@dataclass
class Story:
    event: dict[str, Any]
    body: str  # the stored payload, pretty-printed (rendered escaped, never as markup)
    outcomes: list[tuple[str, str, datetime]] = field(default_factory=list)
    transfers: list[dict[str, Any]] = field(default_factory=list)
    chain: dict[str, Any] | None = None
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    reversed_by: list[tuple[str, Any, datetime]] = field(default_factory=list)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[tuple[datetime, str]] = field(default_factory=list)


def _rows(cur: Cursor, columns: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    names = columns or tuple(d[0] for d in cur.description or ())
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def story(cur: Cursor, event_id: str) -> Story | None:
    cur.execute(f"SELECT {', '.join(EVENT_COLUMNS)}, payload"
                " FROM payment_events JOIN event_status USING (event_id)"
                " WHERE event_id = %s", (event_id,))
    row = cur.fetchone()
    if row is None:
        return None
    event = dict(zip(EVENT_COLUMNS, row[:-1], strict=True))
    told = Story(event, json.dumps(row[-1], indent=2, sort_keys=True, ensure_ascii=False))
    timeline = told.timeline
    timeline.append((event["received_at"], f"received from {event['provider']}"))

    keys = {idempotency_key(event_id, t.value): t.value for t in EventType}
    cur.execute("SELECT idempotency_key, outcome, processed_at FROM processed_events"
                " WHERE idempotency_key = ANY(%s)", (list(keys),))
    for key, outcome, at in cur.fetchall():
        told.outcomes.append((keys[key], outcome, at))
        timeline.append((at, f"ledger: {keys[key]} {outcome}"))

    _transfers(cur, told, event_id)

    cur.execute("SELECT network, tx_hash, block_number, log_index, token_contract,"
                " recipient, state, verdict_reason, final_block_number, recorded_at,"
                " decided_at, settled_at FROM chain_deposits WHERE event_id = %s",
                (event_id,))
    chain = _rows(cur)
    if chain:
        told.chain = chain[0]
        for column, what in (("recorded_at", "chain deposit recorded"),
                             ("decided_at", f"finality decided: {chain[0]['state']}"),
                             ("settled_at", "chain deposit settled")):
            if chain[0][column] is not None:
                timeline.append((chain[0][column], what))

    cur.execute(f"SELECT {', '.join(DLQ_COLUMNS)} FROM dead_letter_queue"
                " WHERE event_id = %s ORDER BY id", (event_id,))
    told.dead_letters = _rows(cur, DLQ_COLUMNS)
    for dead in told.dead_letters:
        timeline.append((dead["first_seen_at"], f"dead-lettered: {dead['error_reason']}"
                                                f" (dead letter {dead['id']})"))

    cur.execute("SELECT event_id, amount, created_at FROM event_reversals"
                " WHERE reverses = %s ORDER BY created_at", (event_id,))
    told.reversed_by = [tuple(r) for r in cur.fetchall()]

    _notifications(cur, told, event_id)
    if event["status_changed_at"] != event["received_at"]:
        timeline.append((event["status_changed_at"], f"status now {event['status']}"))
    timeline.sort(key=lambda item: item[0])
    return told


def _transfers(cur: Cursor, told: Story, event_id: str) -> None:
    """The event's transfers with their postings, on the timeline."""
    cur.execute("SELECT transfer_id, event_type, created_at FROM transfers"
                " WHERE source_event_id = %s ORDER BY transfer_id", (event_id,))
    told.transfers = _rows(cur, ("transfer_id", "event_type", "created_at"))
    if not told.transfers:
        return
    cur.execute("SELECT p.transfer_id, a.kind, a.owner, p.asset, p.amount"
                " FROM postings p JOIN accounts a USING (account_id)"
                " WHERE p.transfer_id = ANY(%s) ORDER BY p.transfer_id, p.amount",
                ([t["transfer_id"] for t in told.transfers],))
    postings: dict[int, list[tuple[Any, ...]]] = {}
    for transfer_id, *posting in cur.fetchall():
        postings.setdefault(transfer_id, []).append(tuple(posting))
    for t in told.transfers:
        t["postings"] = postings.get(t["transfer_id"], [])
        told.timeline.append((t["created_at"], f"transfer {t['transfer_id']} posted"
                                               f" ({t['event_type']})"))


def _notifications(cur: Cursor, told: Story, event_id: str) -> None:
    """The notification intents the event made, each with its deliveries."""
    ids = [intent_id(event_id, t) for t in IntentType]
    cur.execute("SELECT intent_id, type, recorded_at FROM notification_intents"
                " WHERE intent_id = ANY(%s) ORDER BY recorded_at", (ids,))
    told.notifications = _rows(cur, ("intent_id", "type", "recorded_at"))
    if not told.notifications:
        return
    cur.execute("SELECT d.intent_id, d.endpoint_id, d.state, d.attempts, d.last_status,"
                " d.delivered_at FROM notification_deliveries d"
                " WHERE d.intent_id = ANY(%s) ORDER BY d.endpoint_id",
                ([i["intent_id"] for i in told.notifications],))
    slots: dict[str, list[tuple[Any, ...]]] = {}
    for intent, *slot in cur.fetchall():
        slots.setdefault(intent, []).append(tuple(slot))
    for row in told.notifications:
        row["deliveries"] = slots.get(row["intent_id"], [])
        told.timeline.append((row["recorded_at"], f"notification {row['type']} recorded"))
