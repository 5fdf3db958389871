"""The server settings the ledger's write path relies on, seen on the running stack:
a backend keeps the memory its big statements used (glibc's malloc settings,
stack/postgres.py MALLOC_TUNABLES), a fresh backend maps the buffer pool in huge pages
(stack/huge_pages.py), the write path's settings are in force, and the outbox's big
intents records, compressed with lz4 (migration 0019), reach their topic whole through
Debezium."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from paystream.notify.intents import parse_batch
from paystream.notify.seal import process_sealer
from paystream.schema.db import Connection, PostgresAddress, connect, database_url
from paystream.schema.events import NOTIFICATIONS_TOPIC, EventType, PaymentEvent
from paystream.stack import postgres
from tests.support.consumers import read_all, record_of, store_events, wire_message
from tests.support.ids import unique
from tests.support.ledger import ledger_apply
from tests.support.waiting import wait_until

# 200,000 keys in one text[]: the shape of the ledger's batch arguments, ~2.4 MB, far
# above glibc's default mmap threshold (128 KB, raised at most to 32 MB on free).
_KEYS = "{" + ",".join(f"k{i:08d}" for i in range(200_000)) + "}"


def _minor_faults(pid: int) -> int:
    # Field 10 of /proc/PID/stat (minflt), counted after the command's closing paren.
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def test_a_backend_does_not_fault_its_memory_in_again_for_each_big_statement() -> None:
    # One transaction, so a pooler in front keeps us on one server backend.
    conn = connect(database_url("owner"))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pid = cur.fetchone()[0]
            faults = []
            for _ in range(4):
                before = _minor_faults(pid)
                cur.execute("SELECT count(*) FROM unnest(%s::text[])", (_KEYS,))
                assert cur.fetchone()[0] == 200_000
                faults.append(_minor_faults(pid) - before)
        conn.rollback()
    finally:
        conn.close()
    # The first run may fault its memory in; the repeats reuse it. With glibc's
    # defaults each repeat faulted ~4,100 fresh pages (seen: [3389, 4107, 4107, 4107]).
    assert max(faults[1:]) < 200, faults


def test_a_fresh_backend_maps_the_buffer_pool_in_huge_pages(db: Connection) -> None:
    table = unique("hp_probe").replace("-", "_")
    direct = PostgresAddress.direct_from_env().dsn("owner")  # a pooler would reuse one
    with db.cursor() as cur:
        # ~40 MB: under a quarter of the pool, so a scan keeps it in shared buffers.
        cur.execute(f"CREATE TABLE {table} AS SELECT i, repeat('x', 200) AS pad"
                    " FROM generate_series(1, 150000) i")
        cur.execute(f"SELECT count(*) FROM {table}")
    try:
        conn = connect(direct)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_backend_pid()")
                pid = cur.fetchone()[0]
                before = _minor_faults(pid)
                cur.execute(f"SELECT count(*), sum(length(pad)) FROM {table}")
                assert cur.fetchone() == (150_000, 30_000_000)
                faults = _minor_faults(pid) - before
                cur.execute("SELECT pg_relation_size(%s)", (table,))
                pages_4k = cur.fetchone()[0] // 4096
        finally:
            conn.close()
    finally:
        with db.cursor() as cur:
            cur.execute(f"DROP TABLE {table}")
    # In 4 KB pages the new backend faults for the pool's pages it reads, 16 at a time
    # (the kernel's fault-around): seen 677 faults for 8,824 pages with huge_pages=off.
    # In 2 MB pages: 93 (the pool's, and the backend's own memory).
    assert faults < pages_4k / 32, (faults, pages_4k)


def test_the_write_path_settings_are_in_force(db: Connection) -> None:
    with db.cursor() as cur:
        for name, value in postgres.WRITE_PATH_SETTINGS.items():
            cur.execute("SELECT current_setting(%s)", (name,))
            assert cur.fetchone()[0] == value, name


def test_a_compressed_intents_record_reaches_the_topic_whole(db: Connection, ledger_db
                                                               ) -> None:
    user = unique("lz4")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    # 300 deposits in one batch of one partition: one intents record of ~90 KB, far
    # above the ~2 KB at which Postgres compresses a value.
    events = [PaymentEvent(unique(f"lz4-{i}"), EventType.DEPOSIT, user, "USD",
                           Decimal(f"{i + 1}.000000000000000001"), "payments")
              for i in range(300)]
    with db.cursor() as cur:
        store_events(cur, events)
    result = ledger_apply(ledger_db.connection(),
                          [record_of(wire_message(e), offset=i) for i, e in enumerate(events)])
    assert not result.dead_letters, result.dead_letters

    def ours() -> list[bytes]:
        return [m.value() for m in read_all(NOTIFICATIONS_TOPIC)
                if user.encode() in (m.value() or b"")]

    wait_until(lambda: bool(ours()), 60, "the batch's intents record", interval_s=1)
    (value,) = ours()
    assert len(value) > 50_000
    intents, problems = parse_batch(json.loads(value), process_sealer())
    assert not problems
    assert {(i.data["event_id"], i.data["amount"]) for i, _ in intents} == {
        (e.event_id, f"{e.amount}") for e in events}

    # Stored now as the outbox stored it then: the same payload, compressed with lz4.
    conn = connect(database_url("owner"))
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO outbox (id, aggregatetype, aggregateid, type, event_id,"
                        " payload, trace_id) VALUES (gen_random_uuid(), 'test', %s, 'intents',"
                        " %s, %s, 't')", (user, events[0].event_id, value.decode()))
            cur.execute("SELECT pg_column_compression(payload) FROM outbox WHERE aggregateid = %s",
                        (user,))
            assert cur.fetchone()[0] == "lz4"
    finally:
        conn.close()  # never committed: the row goes with the connection
