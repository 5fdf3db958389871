"""Forged records on `paystream.payments`: what a compromised producer could write.

Each batch is three records with every header the outbox's Event Router sets, produced
straight to the topic, past the ingest and the outbox:
  unknown   a deposit of 1,000,000 to a real user under an event id nobody stored:
            a dead letter `unknown_event`, never credited;
  altered   an applied event's id with a larger amount: a dead letter
            `content_mismatch` (the stored event is checked before the duplicate test);
  replayed  an applied event's exact record: a silent duplicate.
Only events already applied are copied: a copy of one still in flight could overtake
its user's earlier events, and the checker's per-user replay of the sender's record
would no longer describe what the ledger saw.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from decimal import Decimal

from confluent_kafka import Producer

from paystream import kafka_security
from paystream.schema.db import Cursor
from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent

FORGED_AMOUNT = Decimal(1_000_000)


@dataclass(frozen=True)
class Forgery:
    kind: str        # unknown, altered or replayed
    event_id: str
    user_id: str
    amount: Decimal  # what the forged record claims


Headers = list[tuple[str, str | bytes | None]]


def _record(event: PaymentEvent) -> tuple[bytes, bytes, Headers]:
    headers: Headers = [("id", os.urandom(8).hex().encode()),
                        ("event_id", event.event_id.encode()),
                        ("event_type", event.event_type.value.encode()),
                        ("trace_id", f"forged-{event.event_id}".encode())]
    value = json.dumps(event.to_wire(), separators=(",", ":")).encode()
    return event.user_id.encode(), value, headers


def forge(cur: Cursor, bootstrap: str, run_id: str, n: int, users: list[str],
          rng: random.Random) -> list[Forgery]:
    """Produce one batch (acknowledged by the broker) and return what was forged."""
    cur.execute("SELECT event_id, user_id, asset, amount, payload->>'invoice_id'"
                " FROM payment_events JOIN event_status USING (event_id)"
                " WHERE event_id LIKE %s AND provider = 'payments' AND event_type = 'deposit'"
                " AND status = 'applied' ORDER BY random() LIMIT 2",
                (f"chaos-{run_id}-e%",))
    applied = cur.fetchall()
    user = rng.choice(users)
    batch = [(Forgery("unknown", f"chaos-{run_id}-forged{n}", user, FORGED_AMOUNT),
              PaymentEvent(f"chaos-{run_id}-forged{n}", EventType.DEPOSIT, user, "USD",
                           FORGED_AMOUNT, "payments"))]
    for kind, (event_id, owner, asset, amount, invoice_id) in zip(("altered", "replayed"),
                                                                  applied, strict=False):
        claimed = amount + FORGED_AMOUNT if kind == "altered" else amount
        # An invoice payment's exact copy names its invoice too.
        batch.append((Forgery(kind, event_id, owner, claimed),
                      PaymentEvent(event_id, EventType.DEPOSIT, owner, asset, claimed,
                                   "payments", invoice_id=invoice_id)))
    errors: list[str] = []
    # The attacker here holds the admin's credentials on purpose: the test is that the
    # ledger refuses forged records that did reach the topic (no ACL stops a super user).
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 30_000,
                         **kafka_security.client_config(kafka_security.ADMIN)})
    for _forgery, event in batch:
        key, value, headers = _record(event)
        producer.produce(PAYMENTS_TOPIC, key=key, value=value, headers=headers,
                         on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    if producer.flush(35) or errors:
        raise RuntimeError(f"forged records not acknowledged: {errors[:2]}")
    return [forgery for forgery, _event in batch]
