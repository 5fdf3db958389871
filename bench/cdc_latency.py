"""Outbox commit → message on the Kafka topic, through Debezium, on the local stack.

Writes N events (default 100) one at a time, each in its own transaction, as ingest
does, for users of its own it creates first (so the `ledger` group of the next `make
run` credits them like any deposit), and times from the COMMIT's return to the
message's arrival at a consumer that is already assigned to the topic's end. Prints
median, p95 and max, and the resident memory of the broker and Connect JVMs. Run with
`make bench-cdc` (the stack must be up).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from decimal import Decimal

from confluent_kafka import Consumer, TopicPartition

from paystream import kafka_security
from paystream.kafka_nodes import kafka_bootstrap
from paystream.schema.db import connect as db_connect
from paystream.schema.db import database_url
from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.schema.outbox import write_event
from paystream.schema.users import add_user
from paystream.stack import connect, kafka
from paystream.stack.process import read_pid
from paystream.stack.settings import StackSettings

USERS = 10  # the events go round this many users of the run's own


def bench_users(run_id: str) -> list[str]:
    """The run's users, created as `paystream users add` does: the ledger credits only
    users that exist (an event for anyone else is a rejection, or worse)."""
    users = [f"bench-cdc-{run_id}-u{i}" for i in range(USERS)]
    conn = db_connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            for user in users:
                add_user(cur, user)
    finally:
        conn.close()
    return users


def bench_event(run_id: str, users: list[str], i: int) -> PaymentEvent:
    """The run's i-th event: a deposit to one of its users."""
    return PaymentEvent(f"bench-cdc-{run_id}-{i}", EventType.DEPOSIT, users[i % len(users)],
                        "USD", Decimal("1.5"), "bench")


def write_events(run_id: str, users: list[str], count: int, gap_s: float,
                 committed: dict[str, float]) -> None:
    """`count` events through the outbox, one transaction each as the ingest writes them,
    `gap_s` apart; the time each COMMIT returned goes in `committed`."""
    conn = db_connect(database_url("ingest"))
    try:
        for i in range(count):
            event = bench_event(run_id, users, i)
            with conn, conn.cursor() as cur:
                write_event(cur, event, f"bench-{run_id}")
            committed[event.event_id] = time.monotonic()
            time.sleep(gap_s)
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--gap-ms", type=float, default=50, help="pause between events")
    args = parser.parse_args()

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap(), "group.id": "bench-cdc",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                         **kafka_security.client_config(kafka_security.ADMIN)})
    md = consumer.list_topics(PAYMENTS_TOPIC, timeout=10).topics[PAYMENTS_TOPIC]
    parts = []
    for p in md.partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(PAYMENTS_TOPIC, p))
        parts.append(TopicPartition(PAYMENTS_TOPIC, p, high))
    consumer.assign(parts)
    consumer.poll(1.0)  # let the fetchers start before the clock does

    run_id = uuid.uuid4().hex[:8]
    users = bench_users(run_id)
    committed: dict[str, float] = {}
    arrived: dict[str, float] = {}
    thread = threading.Thread(target=write_events, args=(run_id, users, args.events,
                                                         args.gap_ms / 1000, committed))
    thread.start()
    deadline = time.monotonic() + 60 + args.events * args.gap_ms / 1000
    while len(arrived) < args.events and time.monotonic() < deadline:
        msg = consumer.poll(0.05)
        if msg is None or msg.error():
            continue
        now = time.monotonic()
        ids = [v.decode() for k, v in msg.headers() or [] if k == "event_id"]
        if ids and ids[0].startswith(f"bench-cdc-{run_id}-"):
            arrived[ids[0]] = now
    thread.join()
    consumer.close()

    lat = sorted((arrived[k] - committed[k]) * 1000 for k in arrived if k in committed)
    if not lat:
        raise SystemExit("no event arrived: is the stack up (paystream stack status)?")
    s = StackSettings.from_env()
    print(f"events: {len(lat)}/{args.events} arrived")
    print(f"outbox commit -> topic: median {statistics.median(lat):.1f} ms, "
          f"p95 {lat[int(0.95 * (len(lat) - 1))]:.1f} ms, max {lat[-1]:.1f} ms")
    print(f"broker RSS: {kafka.jvm_rss_mib(read_pid(kafka.pid_file(s)))}, "
          f"connect RSS: {kafka.jvm_rss_mib(read_pid(connect.pid_file(s)))}")


if __name__ == "__main__":
    main()
