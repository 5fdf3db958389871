"""The outbox → Debezium → Kafka path on the real stack: the outbox's delivery guarantees
(docs/guarantees.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from decimal import Decimal

from paystream.kafka_nodes import kafka_bootstrap
from paystream.launch import paystream_argv
from paystream.schema.db import connect as db_connect
from paystream.schema.db import database_url
from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.schema.outbox import WriteOutcome, write_event
from paystream.stack import connect, postgres
from paystream.stack.kafka import kcat_config_file, kcat_env
from paystream.stack.settings import StackSettings
from tests.support.ids import unique
from tests.support.topics import headers_of


def _write(db, user: str, amount: str, trace: str) -> PaymentEvent:
    event = PaymentEvent(unique("evt"), EventType.DEPOSIT, user, "USD", Decimal(amount),
                         "payments")
    with db.cursor() as cur:
        cur.execute("BEGIN")
        assert write_event(cur, event, trace) is WriteOutcome.ACCEPTED
        cur.execute("COMMIT")
    return event


def _for_ids(*ids: str):
    return lambda msg: headers_of(msg).get("event_id") in ids


def test_outbox_row_arrives_on_topic_with_key_headers_and_payload(db, topic_reader):
    reader = topic_reader(PAYMENTS_TOPIC)
    user, trace = unique("user"), unique("trace")
    event = _write(db, user, "50.1", trace)

    [msg] = reader.read(1, timeout=10, match=_for_ids(event.event_id))

    assert msg.key().decode() == user
    headers = headers_of(msg)
    assert headers["event_id"] == event.event_id
    assert headers["event_type"] == "deposit"
    assert headers["trace_id"] == trace
    assert len(headers["id"]) == 36  # the outbox row's uuid
    value = json.loads(msg.value())
    assert value == event.to_wire()
    assert value["amount"] == "50.1"  # a string, exactly as written
    # The outbox table stays empty: the row was deleted in the same transaction.
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM outbox WHERE event_id = %s", (event.event_id,))
        assert cur.fetchone()[0] == 0


def test_one_users_events_share_a_partition_in_order(db, topic_reader):
    reader = topic_reader(PAYMENTS_TOPIC)
    user = unique("user")
    first = _write(db, user, "1", unique("t"))
    second = _write(db, user, "2", unique("t"))

    msgs = reader.read(2, timeout=10, match=_for_ids(first.event_id, second.event_id))

    assert [headers_of(m)["event_id"] for m in msgs] == [first.event_id, second.event_id]
    assert msgs[0].partition() == msgs[1].partition()
    assert msgs[0].offset() < msgs[1].offset()


def test_kcat_shows_key_headers_and_payload(db, topic_reader):
    reader = topic_reader(PAYMENTS_TOPIC)
    user, trace = unique("user"), unique("trace")
    event = _write(db, user, "7.25", trace)
    [msg] = reader.read(1, timeout=10, match=_for_ids(event.event_id))

    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (paystream stack up installs it)"
    out = subprocess.run(
        [kcat, "-F", str(kcat_config_file()), "-b", kafka_bootstrap(), "-C",
         "-t", msg.topic(), "-p", str(msg.partition()), "-o", str(msg.offset()), "-c", "1", "-e",
         "-f", "key=%k\\nheaders=%h\\nvalue=%s\\n"],
        capture_output=True, text=True, timeout=30, check=True,
        env={**os.environ, **kcat_env(StackSettings.from_env())},
    ).stdout
    assert f"key={user}\n" in out
    assert f"event_id={event.event_id}" in out
    assert f"trace_id={trace}" in out
    value_line = next(line for line in out.splitlines() if line.startswith("value="))
    assert json.loads(value_line.removeprefix("value=")) == event.to_wire()


def test_event_written_while_connect_is_down_arrives_after_restart(db, topic_reader):
    settings = StackSettings.from_env()
    reader = topic_reader(PAYMENTS_TOPIC)
    connect.stop(settings)
    try:
        event = _write(db, unique("user"), "3", unique("t"))
        assert reader.read(1, timeout=2, match=_for_ids(event.event_id)) == []
    finally:
        connect.start(settings)
        connect.wait_running(settings)
    # The replication slot kept the change while nobody read it.
    assert len(reader.read(1, timeout=30, match=_for_ids(event.event_id))) == 1


def test_stack_down_and_up_keeps_data_and_unsent_events(db, topic_reader):
    """`paystream stack down`; write while Kafka and Connect are down; `stack up`."""
    settings = StackSettings.from_env()
    reader = topic_reader(PAYMENTS_TOPIC)  # positioned at the end before the restart
    before = _write(db, unique("user"), "4", unique("t"))
    db.close()
    subprocess.run(paystream_argv("stack", "down"), check=True, timeout=180)
    try:
        postgres.start(settings)  # only the database: the broker and Connect stay down
        conn = db_connect(database_url("owner"))
        conn.autocommit = True
        try:
            during = _write(conn, unique("user"), "5", unique("t"))
            with conn.cursor() as cur:  # data written before `down` survived it
                cur.execute("SELECT amount FROM payment_events WHERE event_id = %s",
                            (before.event_id,))
                assert cur.fetchone()[0] == Decimal("4")
        finally:
            conn.close()
    finally:
        subprocess.run(paystream_argv("stack", "up"), check=True, timeout=600)
    msgs = reader.read(2, timeout=60, match=_for_ids(before.event_id, during.event_id))
    assert sorted(headers_of(m)["event_id"] for m in msgs) == sorted(
        [before.event_id, during.event_id])
