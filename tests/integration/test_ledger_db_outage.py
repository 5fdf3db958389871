"""Postgres stopped for 30 s under load: the consumer stalls in the group, commits
nothing, dead-letters nothing, and applies everything once the database is back."""

from __future__ import annotations

import threading
import time

import httpx

from paystream.connectors.endpoint import rest_auth
from paystream.launch import free_port
from paystream.schema.db import connect as db_connect
from paystream.schema.db import database_url
from paystream.stack import connect, postgres
from paystream.stack.settings import StackSettings
from tests.support.consumers import (
    assert_applied_exactly_once,
    committed,
    create_topic,
    create_users,
    drained,
    end_offsets,
    make_events,
    producer,
    store_events,
    wait_until,
    wire_message,
)
from tests.support.ids import unique

OUTAGE_S = 30


def _metric(port: int, name: str) -> float | None:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def _committed_total(group: str, topic: str) -> int:
    return sum(max(o, 0) for o in committed(group, topic, range(12)).values())


def _restore(stack: StackSettings) -> None:
    """Postgres back up, and Debezium's task running again if the outage failed it."""
    postgres.start(stack)
    st = connect.status(stack)
    if st is not None and any(t.state == "FAILED" for t in st.tasks):
        httpx.post(f"{stack.connect_url}/connectors/{stack.connector_name}/restart"
                   "?includeTasks=true&onlyFailed=true", timeout=30, auth=rest_auth())
    connect.wait_running(stack, timeout=60)


def test_postgres_outage_under_load(db, pool) -> None:
    stack = StackSettings.from_env()
    topic, group, dlq = unique("outage-topic"), unique("outage-group"), unique("outage-dlq")
    create_topic(topic)
    users = [unique("outage-user") for _ in range(40)]
    events = make_events(unique("outage-ev"), users, 4000)
    with db.cursor() as cur:
        create_users(cur, users)
        store_events(cur, events)  # as the ingest does: the ledger credits only these
    db.close()  # the outage would break it anyway
    port = free_port()
    proc = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq,
                      extra_args=["--metrics-port", str(port), "--batch-size", "200"])

    stop_load = threading.Event()

    def load() -> None:  # ~100 events/s before, during and after the outage
        prod = producer()
        for event in events:
            if stop_load.is_set():
                break
            key, value, headers = wire_message(event)
            prod.produce(topic, key=key, value=value, headers=headers)
            prod.poll(0)
            time.sleep(0.01)
        prod.flush(30)

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        wait_until(lambda: _committed_total(group, topic) > 200, 30, "first commits")
        postgres.stop(stack)
        time.sleep(2)  # let the consumer notice; nothing can commit from here on
        frozen = _committed_total(group, topic)
        wait_until(lambda: _metric(port, "paystream_consumer_stalled") == 1.0, 15, "stalled")
        # Between two retries the partitions are resumed for one poll: sample the gauges.
        paused, stalled = [], []
        outage_ends = time.monotonic() + OUTAGE_S - 4
        while time.monotonic() < outage_ends:
            paused.append(_metric(port, "paystream_consumer_paused_partitions"))
            stalled.append(_metric(port, "paystream_consumer_stalled"))
            time.sleep(0.3)
        assert max(paused) == 12.0 and set(stalled) == {1.0}, (paused, stalled)
        assert _metric(port, "paystream_consumer_retries_total") > 0
        assert _committed_total(group, topic) == frozen, "offsets moved while the DB was down"
        assert proc.alive(), proc.tail()
    finally:
        _restore(stack)
    loader.join(120)
    stop_load.set()
    try:
        wait_until(lambda: sum(end_offsets(topic).values()) == len(events), 60, "all produced")
        wait_until(lambda: drained(group, topic), 90, "drained after the outage")
    except AssertionError:
        raise AssertionError(pool.logs()) from None
    assert _metric(port, "paystream_consumer_stalled") == 0.0
    assert proc.events("consumer_stalled") and proc.events("consumer_recovered")
    # Stayed in the group: the outage caused no rebalance and no lost partitions.
    assert not proc.events("partitions_revoked") and not proc.events("partitions_lost")
    assert not proc.events("dead_lettered")
    assert sum(end_offsets(dlq).values()) == 0
    assert proc.terminate() == 0, proc.tail()
    conn = db_connect(database_url("owner"))
    try:
        with conn.cursor() as cur:
            assert_applied_exactly_once(cur, events)
    finally:
        conn.close()
