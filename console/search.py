"""The console's search box: one string, looked up as every kind of id an operator has
in hand after an incident: an event id, a user id, a trace id, the ledger's idempotency
key (64 hex), a merchant's Idempotency-Key, a transaction hash, an address, a
notification id. Each lookup is one index probe (migration 0029 adds the missing
indexes); at most PAGE rows of each kind."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from paystream.schema.db import Cursor

PAGE = 50
MAX_QUERY = 200
HEX64 = re.compile(r"(0x)?[0-9a-fA-F]{64}")
ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
INTENT = re.compile(r"ntf_[0-9a-f]{32}")
_EVENT_COLUMNS = ("p.event_id, p.user_id, p.provider, p.event_type, p.asset, p.amount,"
                  " s.status, p.received_at")


@dataclass(frozen=True)
class EventRow:
    found_as: str  # which kind of id matched
    event_id: str
    user_id: str
    provider: str
    event_type: str
    asset: str
    amount: Decimal
    status: str
    received_at: datetime


@dataclass
class Found:
    query: str
    events: list[EventRow] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    addresses: list[tuple[str, str, str]] = field(default_factory=list)  # network, address, user
    intents: list[str] = field(default_factory=list)
    dead_letters: list[int] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.events or self.users or self.addresses or self.intents
                    or self.dead_letters)


def find(cur: Cursor, query: str) -> Found:
    q = query.strip()[:MAX_QUERY]
    found = Found(q)
    if not q:
        return found
    seen: set[str] = set()

    def events(sql: str, params: tuple[object, ...], found_as: str) -> None:
        cur.execute(f"SELECT {_EVENT_COLUMNS} FROM payment_events p"
                    f" JOIN event_status s USING (event_id) {sql} LIMIT {PAGE}", params)
        for row in cur.fetchall():
            if row[0] not in seen:
                seen.add(row[0])
                found.events.append(EventRow(found_as, *row))

    events("WHERE p.event_id = %s", (q,), "event id")
    events("WHERE p.trace_id = %s", (q,), "trace id")
    cur.execute("SELECT user_id FROM users WHERE user_id = %s", (q,))
    if cur.fetchone() is not None:
        found.users.append(q)
        events("WHERE p.user_id = %s ORDER BY p.received_at DESC", (q,), "user id")
    if HEX64.fullmatch(q):
        bare = q.lower().removeprefix("0x")
        events("JOIN processed_events e USING (event_id) WHERE e.idempotency_key = %s",
               (bare,), "ledger idempotency key")
        events("JOIN chain_deposits c USING (event_id) WHERE c.tx_hash = %s",
               ("0x" + bare,), "transaction hash")
    if ADDRESS.fullmatch(q):
        address = q.lower()
        cur.execute("SELECT network, address, user_id FROM deposit_addresses"
                    " WHERE address = %s", (address,))
        found.addresses = [tuple(r) for r in cur.fetchall()]
        events("JOIN chain_deposits c USING (event_id) WHERE c.recipient = %s"
               " ORDER BY c.recorded_at DESC", (address,), "recipient address")
    events("JOIN api_idempotency k ON k.withdrawal_id = p.event_id"
           " WHERE k.idempotency_key = %s", (q,), "merchant Idempotency-Key")
    if INTENT.fullmatch(q):
        cur.execute("SELECT intent_id FROM notification_intents WHERE intent_id = %s", (q,))
        found.intents = [r[0] for r in cur.fetchall()]
    if q.isascii() and q.isdigit() and len(q) < 19:  # '²'.isdigit() is true too
        cur.execute("SELECT id FROM dead_letter_queue WHERE id = %s", (int(q),))
        found.dead_letters = [int(r[0]) for r in cur.fetchall()]
    return found
