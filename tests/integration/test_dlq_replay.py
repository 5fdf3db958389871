"""`paystream dlq replay`: after the cause is fixed, the event is applied exactly once.

The dead letter is one the ledger wrote before unknown users became a final rejection
(outcome unknown_user): those still wait in the DLQ after the upgrade, and replaying one
once its user exists must work."""

from __future__ import annotations

import json
import os
import subprocess
from decimal import Decimal

from paystream.consumers.dead_letters import send as dlq
from paystream.launch import paystream_argv
from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.stack.kafka import start_group_at_end
from tests.support.consumers import (
    create_topic,
    create_users,
    produce,
    record_of,
    store_events,
    wait_until,
    wire_message,
)
from tests.support.ids import unique
from tests.support.topics import headers_of


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(paystream_argv("dlq", *args),
                          capture_output=True, text=True, timeout=60)


def _one(db, sql: str, *params):
    with db.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()


def test_replay_after_the_user_is_created_applies_once(db, pool, topic_reader) -> None:
    group, mirror_group = unique("replay-ledger"), unique("replay-mirror")
    dlq_topic = unique("replay-dlq")
    create_topic(dlq_topic)
    start_group_at_end(group, PAYMENTS_TOPIC)
    pool.start("ledger", topic=PAYMENTS_TOPIC, group=group, dlq_topic=dlq_topic,
               extra_args=["--batch-timeout", "0.05"])
    pool.start("dlq-mirror", topic=dlq_topic, group=mirror_group, dlq_topic=dlq_topic + ".x",
               extra_args=["--batch-timeout", "0.05"])
    user = unique("replay-user")  # not created yet: the event was dead-lettered
    event = PaymentEvent(unique("replay-ev"), EventType.DEPOSIT, user, "USDC",
                         Decimal("7.25"), "test")
    trace = "trace-" + event.event_id  # the trace id store_events records
    with db.cursor() as cur:
        store_events(cur, [event])  # as the ingest stored it
    # The dead letter the ledger produced for it before the upgrade, as it produced it.
    key, value, headers = wire_message(event, trace)
    # At an offset of its own: dead_letter_queue keeps one row per origin.
    origin_offset = int.from_bytes(os.urandom(5), "big")
    old_letter = dlq.DeadLetter(
        record_of((key, value, headers), offset=origin_offset, topic=PAYMENTS_TOPIC),
        "unknown_user", f"user {user!r} does not exist")
    produce(dlq_topic, [(key, value, dlq.dlq_headers(old_letter, group))])

    def dead_letter():
        return _one(db, "SELECT id, error_reason, status FROM dead_letter_queue"
                    " WHERE event_id = %s", event.event_id)

    try:
        wait_until(lambda: dead_letter() is not None, 60, "the dead letter in the table")
        wait_until(lambda: _one(db, "SELECT status FROM event_status WHERE event_id = %s",
                                event.event_id) == ("dead_lettered",), 30, "dead_lettered")
    except AssertionError:
        raise AssertionError(pool.logs()) from None
    dlq_id, reason, status = dead_letter()
    assert (reason, status) == ("unknown_user", "open")
    # The mirror records the stored event's provider with it (the console filters by it).
    wait_until(lambda: _one(db, "SELECT provider FROM dead_letter_queue WHERE id = %s",
                            dlq_id) == (event.provider,), 10, "the dead letter's provider")
    listed = _cli("list")
    assert listed.returncode == 0 and event.event_id in listed.stdout
    shown = _cli("show", str(dlq_id))
    assert shown.returncode == 0 and trace in shown.stdout

    with db.cursor() as cur:
        create_users(cur, [user])  # a person fixes the cause
        # The dead letter's copy is only evidence: reformatted (same content) and with
        # another trace id, it is still the stored event that is sent, as it was stored.
        cur.execute("UPDATE dead_letter_queue SET payload = %s, headers = headers ||"
                    " '{\"trace_id\": \"trace-of-the-copy\"}' WHERE id = %s",
                    (json.dumps(event.to_wire(), indent=2), dlq_id))
    reader = topic_reader(PAYMENTS_TOPIC)
    replayed = _cli("replay", str(dlq_id))
    assert replayed.returncode == 0, replayed.stderr
    sent = reader.read(1, 30, lambda m: headers_of(m).get("event_id") == event.event_id)
    assert len(sent) == 1
    assert headers_of(sent[0])["trace_id"] == trace
    assert json.loads(sent[0].value()) == event.to_wire()
    try:
        wait_until(lambda: _one(db, "SELECT status FROM event_status WHERE event_id = %s",
                                event.event_id) == ("applied",), 60, "the replay applied")
    except AssertionError:
        raise AssertionError(pool.logs()) from None
    assert _one(db, "SELECT balance FROM balances WHERE user_id = %s", user) == \
        (Decimal("7.25"),)
    assert _one(db, "SELECT count(*) FROM user_entries"
                    " WHERE book = 'available' AND source_event_id = %s",
                event.event_id) == (1,)
    assert _one(db, "SELECT status, provider FROM dead_letter_queue WHERE id = %s",
                dlq_id) == ("replayed", event.provider)  # kept through the replay

    again = _cli("replay", str(dlq_id))
    assert again.returncode == 1 and "not open" in again.stderr
    # Even reopened by hand, an applied event is never sent again.
    with db.cursor() as cur:
        cur.execute("UPDATE dead_letter_queue SET status = 'open' WHERE id = %s", (dlq_id,))
    applied = _cli("replay", str(dlq_id))
    assert applied.returncode == 1 and "is applied, not dead_lettered" in applied.stderr
    for proc in pool.procs:
        assert proc.terminate() == 0, proc.tail()
