"""Poison messages go to the DLQ topic and table with their cause; the partition moves on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from decimal import Decimal

from paystream.consumers.dead_letters import send as dlq
from paystream.kafka_nodes import kafka_bootstrap
from paystream.launch import paystream_argv
from paystream.schema.events import EventType, PaymentEvent
from paystream.stack.kafka import kcat_config_file, kcat_env
from paystream.stack.settings import StackSettings
from tests.support.consumers import (
    create_topic,
    create_users,
    drained,
    produce,
    read_all,
    store_events,
    wait_until,
    wire_message,
)
from tests.support.ids import unique


def _kcat_produce(topic: str, partition: int, key: str, payload_file) -> None:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (Debian package kcat; `paystream stack up` installs it)"
    subprocess.run([kcat, "-F", str(kcat_config_file()), "-P", "-b", kafka_bootstrap(),
                    "-t", topic, "-p", str(partition),
                    "-k", key, "-H", "event_id=garbage", "-H", "event_type=deposit",
                    str(payload_file)], check=True, timeout=30,
                   env={**os.environ, **kcat_env(StackSettings.from_env())})


def test_poison_messages_are_dead_lettered_and_the_partition_continues(
        db, pool, tmp_path) -> None:
    topic, dlq_topic = unique("poison-topic"), unique("poison-dlq")
    group, mirror_group = unique("poison-ledger"), unique("poison-mirror")
    create_topic(topic)
    create_topic(dlq_topic)
    user, ghost = unique("poison-user"), unique("poison-ghost")
    with db.cursor() as cur:
        create_users(cur, [user])

    def ev(n: str, kind: EventType, amount: str, who: str = user) -> PaymentEvent:
        return PaymentEvent(f"{user}-{n}", kind, who, "USDC", Decimal(amount), "test")

    first, second, third = (ev("d1", EventType.DEPOSIT, "10"), ev("d\\2", EventType.DEPOSIT, "5"),
                            ev("w1", EventType.WITHDRAWAL, "12"))
    ghostly = ev("ghost", EventType.DEPOSIT, "3", who=ghost)
    with db.cursor() as cur:  # recorded as the ingest would: the ledger credits only these
        store_events(cur, [first, second, third, ghostly])
    # Everything on partition 0, in this order: good, garbage (via kcat), float amount,
    # unknown user, missing header, then good events that must still be applied.
    produce(topic, [wire_message(first)], partition=0)
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\xff\xfe{not json at all\x01")
    _kcat_produce(topic, 0, user, garbage)
    key, value, headers = wire_message(ev("float", EventType.DEPOSIT, "1"))
    body = json.loads(value)
    body["amount"] = 1.5
    float_amount = (key, json.dumps(body).encode(), headers)
    unknown_user = wire_message(ghostly)
    k, v, h = wire_message(ev("nohdr", EventType.DEPOSIT, "2"))
    no_header = (k, v, [x for x in h if x[0] != "event_type"])
    produce(topic, [float_amount, unknown_user, no_header, wire_message(second),
                    wire_message(third)], partition=0)

    ledger = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq_topic)
    mirror = pool.start("dlq-mirror", topic=dlq_topic, group=mirror_group,
                        dlq_topic=dlq_topic + ".x")
    try:
        wait_until(lambda: drained(group, topic), 60, "ledger past the poison")
        wait_until(lambda: drained(mirror_group, dlq_topic), 60, "mirror past the DLQ")
    except AssertionError:
        raise AssertionError(pool.logs()) from None

    # The unknown user's deposit is no dead letter: it is what the outbox stored, judged
    # from the books (a final rejection, below).
    expected = {1: "malformed_json", 2: "invalid_amount", 4: "missing_header"}
    on_topic = read_all(dlq_topic)
    reasons = {}
    for msg in on_topic:
        hdr = {k: v.decode() for k, v in msg.headers()}
        assert hdr[dlq.H_SOURCE_TOPIC] == topic and hdr[dlq.H_SOURCE_PARTITION] == "0"
        reasons[int(hdr[dlq.H_SOURCE_OFFSET])] = hdr[dlq.H_REASON]
        if hdr[dlq.H_REASON] == "malformed_json":
            assert msg.value() == garbage.read_bytes()  # original bytes, untouched
    assert reasons == expected

    with db.cursor() as cur:
        cur.execute("SELECT source_offset, error_reason, error_detail, payload, headers,"
                    " attempts, message_key FROM dead_letter_queue WHERE source_topic = %s"
                    " ORDER BY source_offset", (topic,))
        rows = cur.fetchall()
        assert {r[0]: r[1] for r in rows} == expected
        by_offset = {r[0]: r for r in rows}
        assert "1.5" in by_offset[2][3] and "JSON number" in by_offset[2][2]
        assert by_offset[1][4]["event_id"] == "garbage"
        assert all(r[6] == user for r in rows)
        cur.execute("SELECT p.outcome, e.status FROM processed_events p JOIN event_status e"
                    " USING (event_id) WHERE event_id = %s", (ghostly.event_id,))
        assert cur.fetchall() == [("unknown_user", "rejected")]
        cur.execute("SELECT count(*) FROM balances WHERE user_id = %s", (ghost,))
        assert cur.fetchone() == (0,)
        assert all(len(r[5]) == 1 and r[5][0]["group"] == group for r in rows)
        cur.execute("SELECT id FROM dead_letter_queue WHERE source_topic = %s"
                    " AND source_offset = 1", (topic,))
        garbage_id = cur.fetchone()[0]
        # The good events around the poison were applied, in order: 10 + 5 - 12.
        cur.execute("SELECT balance FROM balances WHERE user_id = %s", (user,))
        assert cur.fetchone() == (Decimal(3),)
        cur.execute("SELECT source_event_id FROM user_entries"
                    " WHERE book = 'available' AND user_id = %s"
                    " ORDER BY transfer_id", (user,))
        # The journal is written with COPY: a backslash in an event id survives it.
        assert [r[0] for r in cur.fetchall()] == [first.event_id, second.event_id,
                                                  third.event_id]

    refused = subprocess.run(paystream_argv("dlq", "replay", str(garbage_id)),
                             capture_output=True, text=True, timeout=60)
    # Its event id names no stored event: there is nothing the outbox could send again.
    assert refused.returncode == 1 and "no payment_events row" in refused.stderr, refused
    assert ledger.terminate() == 0 and mirror.terminate() == 0


def test_records_judged_dead_never_count_against_the_dlq_limit(db, pool) -> None:
    topic, dlq_topic, group = unique("flood-topic"), unique("flood-dlq"), unique("flood")
    create_topic(topic)
    create_topic(dlq_topic)
    # Undecodable records are the handler's verdict on untrusted input: each is
    # dead-lettered with its cause, however many, and the group goes on. The limit
    # (here 5) counts only the records the handler raised on (test_ledger_flood.py).
    produce(topic, [(b"u", b"not json", []) for _ in range(50)], partition=0)
    proc = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq_topic,
                      extra_args=["--dlq-limit", "5"])
    try:
        wait_until(lambda: drained(group, topic), 60, "the ledger past 50 dead letters")
    except AssertionError:
        raise AssertionError(proc.tail()) from None
    reasons = [{k: v for k, v in m.headers()}[dlq.H_REASON] for m in read_all(dlq_topic)]
    assert reasons == [b"malformed_json"] * 50
    assert not proc.events("consumer_group_stopped"), proc.tail()
    assert proc.terminate() == 0
