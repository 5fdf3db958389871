"""From the money to the receiver: the ledger's batch writes its intents to the outbox,
Debezium routes them to paystream.notifications, the notifier records and delivers them,
signed, to a real receiver; the operator's shortfall resolution is told too; a replayed
batch tells nobody twice."""

from __future__ import annotations

import subprocess
from decimal import Decimal
from itertools import count

from paystream.chaos.receiver import receiver
from paystream.launch import paystream_argv
from paystream.notify.intents import IntentType, intent_id
from paystream.schema.db import Connection
from paystream.schema.events import NOTIFICATIONS_TOPIC, EventType, PaymentEvent
from tests.integration.test_notify_delivery import PORT
from tests.support.consumers import (
    ProcessPool,
    record_of,
    start_at_end,
    store_events,
    wire_message,
)
from tests.support.ids import unique
from tests.support.ledger import ledger_apply
from tests.support.notify import FAST, add_endpoint
from tests.support.waiting import wait_until

_offsets = count()


def test_ledger_changes_reach_the_receiver_once_each(db: Connection, ledger_db,
                                                     pool: ProcessPool) -> None:
    user = unique("ntf-ledger")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    # The notifier's group starts after every earlier test's intents on the shared topic.
    group = unique("ntf-grp")
    start_at_end(group, NOTIFICATIONS_TOPIC)

    def event(kind: EventType, amount: str, reference: str | None = None) -> PaymentEvent:
        return PaymentEvent(unique(f"ntf-{kind.value}"), kind, user, "USD", Decimal(amount),
                            "payments", reference=reference)

    deposit = event(EventType.DEPOSIT, "100")
    paid = event(EventType.WITHDRAWAL, "30")
    too_much = event(EventType.WITHDRAWAL, "500")
    hold = event(EventType.WITHDRAWAL_REQUESTED, "10")
    settled = event(EventType.WITHDRAWAL_SETTLED, "10", reference=hold.event_id)
    refund = event(EventType.REFUND, "100", reference=deposit.event_id)  # 60 left: short 40
    batches = [[deposit, paid, too_much, hold], [settled, refund]]
    records = []
    for batch in batches:
        with db.cursor() as cur:
            store_events(cur, batch)
        records.append([record_of(wire_message(e), offset=next(_offsets)) for e in batch])
        result = ledger_apply(ledger_db.connection(), records[-1])
        assert not result.dead_letters, result.dead_letters
    # The same batch again (a redelivery): duplicates, no intent.
    again = ledger_apply(ledger_db.connection(), records[1])
    assert again.outcomes["duplicate"] == 2
    with db.cursor() as cur:
        cur.execute("SELECT id FROM account_shortfalls WHERE source_event_id = %s",
                    (refund.event_id,))
        shortfall_id = cur.fetchone()[0]
    resolved = subprocess.run(paystream_argv("shortfalls", "resolve", str(shortfall_id),
                                             "--resolution", "written off by test"),
                              capture_output=True, text=True, timeout=60)
    assert resolved.returncode == 0, resolved.stderr

    expected = {
        (IntentType.DEPOSIT_CREDITED, deposit), (IntentType.WITHDRAWAL_APPLIED, paid),
        (IntentType.WITHDRAWAL_REJECTED, too_much), (IntentType.WITHDRAWAL_REQUESTED, hold),
        (IntentType.WITHDRAWAL_SETTLED, settled), (IntentType.BALANCE_REVERSED, refund),
        (IntentType.SHORTFALL_OPENED, refund), (IntentType.SHORTFALL_RESOLVED, refund)}
    path = f"/ok/{user}"
    with receiver(PORT) as hooks:
        endpoint_id, secret = add_endpoint(hooks.url(path), user)
        hooks.secrets[path] = secret
        try:
            proc = pool.start("notifier", topic=NOTIFICATIONS_TOPIC, group=group,
                              dlq_topic=NOTIFICATIONS_TOPIC + ".dlq", env=FAST)
            wait_until(lambda: len(hooks.ids(path)) >= len(expected), 90,
                       "the ledger's intents at the receiver", interval_s=0.5)
            assert proc.terminate() == 0, proc.tail()
        finally:
            with db.cursor() as cur:
                cur.execute("UPDATE notification_endpoints SET disabled_at = now()"
                            " WHERE endpoint_id = %s", (endpoint_id,))
    assert not hooks.bad, hooks.bad[:3]
    bodies = hooks.bodies(path)
    assert sorted(hooks.ids(path)) == sorted({intent_id(e.event_id, t) for t, e in expected})
    assert {(b["type"], b["data"]["event_id"]) for b in bodies} == {
        (t.value, e.event_id) for t, e in expected}
    by_type = {b["type"]: b["data"] for b in bodies}
    assert by_type["withdrawal.rejected"]["reason"] == "insufficient_funds"
    assert by_type["withdrawal.rejected"]["amount"] == "500"
    assert by_type["shortfall.opened"]["amount"] == "40"  # what was owed, a string
    assert by_type["balance.reversed"]["shortfall"] == "40"
    assert by_type["shortfall.resolved"]["resolution"] == "written off by test"
    assert by_type["withdrawal.settled"]["reference"] == hold.event_id
