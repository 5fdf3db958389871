"""Ledger throughput: the batch consumer group vs a one-transaction-per-event applier.

    make bench-ledger        (or: .venv/bin/python bench/ledger_bench.py [--events N])

Records N events in payment_events as the ingest would (the ledger credits only records
matching their stored event) and preloads a dedicated 12-partition topic with them in
wire format (1,000 users, mixed deposits, airdrops, withdrawals and fees), then times
`paystream consume ledger` processes (one consumer group) draining it into Postgres.
The same events, under their own ids and users, are then applied one transaction per
event in the seed article's style on a subset, and the rate compared. Needs the stack
(`paystream stack up`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from decimal import Decimal
from pathlib import Path

from paystream.schema import processed_events
from paystream.schema.db import connect, database_url
from paystream.schema.events import EventType, PaymentEvent, parse_wire
from paystream.schema.idempotency import idempotency_key
from paystream.schema.processed_events import Outcome
from tests.support.consumers import (
    ConsumerProcess,
    committed,
    create_topic,
    create_users,
    end_offsets,
    produce,
    store_events,
    wire_message,
)


def make_stream(run: str, users: int, count: int, seed: int = 42) -> list[PaymentEvent]:
    """Deposits 65%, airdrops 5%, withdrawals 25%, fees 5%; debits mostly funded."""
    rng = random.Random(seed)
    names = [f"{run}-u{i}" for i in range(users)]
    out = []
    for i in range(count):
        user = names[rng.randrange(users)] if i >= users else names[i]
        roll = rng.random() if i >= users else 0.0
        if roll < 0.65:
            kind, cents = EventType.DEPOSIT, rng.randint(1_000, 100_000)
        elif roll < 0.70:
            kind, cents = EventType.AIRDROP, rng.randint(100, 1_000)
        elif roll < 0.95:
            kind, cents = EventType.WITHDRAWAL, rng.randint(100, 60_000)
        else:
            kind, cents = EventType.WITHDRAWAL_FEE, rng.randint(10, 500)
        out.append(PaymentEvent(f"{run}-e{i}", kind, user, "USDC", Decimal(cents) / 100,
                                "bench"))
    return out


def per_event_baseline(values: list[bytes], suffix: str) -> float:
    """One transaction per event: the shape the seed article applies events in, with the
    outcome recorded through the same module as the ledger (schema.processed_events)."""
    conn = connect(database_url("owner"), application_name="paystream-bench-baseline")
    cur = conn.cursor()
    # Its events are recorded as the ingest would, so its status UPDATE moves real rows.
    store_events(cur, (parse_wire({**w, "event_id": w["event_id"] + suffix,
                                   "user_id": w["user_id"] + suffix})
                       for w in map(json.loads, values)))
    conn.commit()
    started = time.perf_counter()
    for raw in values:
        wire = json.loads(raw)
        wire["event_id"] += suffix
        wire["user_id"] += suffix
        event = parse_wire(wire)
        key = idempotency_key(event.event_id, event.event_type.value)
        cur.execute("INSERT INTO balances (user_id, asset) VALUES (%s, %s)"
                    " ON CONFLICT DO NOTHING", (event.user_id, event.asset))
        cur.execute("SELECT balance FROM balances WHERE user_id = %s AND asset = %s"
                    " FOR UPDATE", (event.user_id, event.asset))
        balance = cur.fetchone()[0]
        delta = event.amount if event.event_type.is_credit else -event.amount
        outcome = (Outcome.INSUFFICIENT_FUNDS if balance + delta < 0 else Outcome.APPLIED)
        # The claim: a key already taken is a duplicate, nothing else to write.
        if processed_events.record(cur, [(key, event.event_id, event.event_type.value,
                                          outcome)]):
            conn.rollback()
            continue
        if outcome is Outcome.APPLIED:
            cur.execute("UPDATE balances SET balance = balance + %s, updated_at = now()"
                        " WHERE user_id = %s AND asset = %s", (delta, event.user_id, event.asset))
            cur.execute("INSERT INTO balance_events (source_event_id, event_type, user_id,"
                        " asset, delta) VALUES (%s, %s, %s, %s, %s)",
                        (event.event_id, event.event_type.value, event.user_id, event.asset,
                         delta))
        status = "applied" if outcome is Outcome.APPLIED else "rejected"
        cur.execute("UPDATE payment_events SET status = %s, status_changed_at = now()"
                    " WHERE event_id = %s AND status = 'received'", (status, event.event_id))
        conn.commit()
    elapsed = time.perf_counter() - started
    conn.close()
    return len(values) / elapsed


def committed_total(group: str, topic: str) -> int:
    return sum(max(o, 0) for o in committed(group, topic, range(12)).values())


def run_group(topic: str, group: str, total: int, processes: int, batch_size: int,
              log_dir: Path) -> tuple[float, float]:
    """(steady drain rate from the first committed batch, wall-clock rate from launch)."""
    launched = time.perf_counter()
    procs = [ConsumerProcess.start("ledger", topic=topic, group=group, dlq_topic=topic + ".dlq",
                                   log_dir=log_dir, name=f"bench-{i}",
                                   extra_args=["--batch-size", str(batch_size)])
             for i in range(processes)]
    try:
        first_at, first_done = None, 0
        while True:
            done = committed_total(group, topic)
            now = time.perf_counter()
            if first_at is None and done > 0:
                first_at, first_done = now, done
            if done >= total:
                break
            if now - launched > 600 or any(not p.alive() for p in procs):
                raise SystemExit("ledger group did not drain:\n"
                                 + "\n".join(p.tail(10) for p in procs))
            time.sleep(0.05)
        finished = time.perf_counter()
    finally:
        for p in procs:
            p.terminate()
    assert first_at is not None
    steady = (total - first_done) / max(finished - first_at, 1e-9)
    return steady, total / (finished - launched)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--baseline-events", type=int, default=5_000)
    ap.add_argument("--processes", type=int, default=3, help="ledger processes in the group")
    ap.add_argument("--batch-size", type=int, default=2_000)
    args = ap.parse_args()

    print("load average before: {:.1f} {:.1f} {:.1f} (2 cores; other stacks share them)"
          .format(*os.getloadavg()))
    run = f"bench-{int(time.time())}-{random.randrange(1 << 16):04x}"
    topic = f"{run}.payments"
    create_topic(topic)
    events = make_stream(run, args.users, args.events)
    conn = connect(database_url("owner"))
    conn.autocommit = True
    t = time.perf_counter()
    with conn.cursor() as cur:
        create_users(cur, sorted({e.user_id for e in events}))
        create_users(cur, sorted({e.user_id + ".b" for e in events}))
        # Recorded as the ingest records them (content hash, status received): the
        # ledger credits a record only if it matches its stored event.
        store_events(cur, events)
    conn.close()
    print(f"recorded {len(events):,} events in payment_events in"
          f" {time.perf_counter() - t:.1f} s")
    messages = [wire_message(e) for e in events]
    t = time.perf_counter()
    produce(topic, messages)
    print(f"preloaded {len(messages):,} events on {topic} (12 partitions, {args.users:,} users)"
          f" in {time.perf_counter() - t:.1f} s")
    assert sum(end_offsets(topic).values()) == len(messages)

    steady, wall = run_group(topic, f"{run}-ledger", len(messages), args.processes,
                             args.batch_size, Path("/tmp") / run)
    print(f"ledger group ({args.processes} processes, batch {args.batch_size}): "
          f"{steady:,.0f} events/s from its first committed batch to the drained topic; "
          f"{wall:,.0f} events/s including process start and group join")

    subset = [m[1] for m in messages[: args.baseline_events]]
    baseline = per_event_baseline(subset, ".b")
    print(f"per-event baseline measured on the first {len(subset):,} of the same events "
          "(own ids and users, one transaction each), rate extrapolated")

    conn = connect(database_url("owner"))
    with conn.cursor() as cur:
        cur.execute("SELECT outcome, count(*) FROM processed_events WHERE event_id LIKE %s"
                    " AND event_id NOT LIKE %s GROUP BY 1", (f"{run}-e%", "%.b"))
        outcomes = dict(cur.fetchall())
    conn.close()
    print(f"check: processed_events outcomes for the ledger run: {outcomes}")
    if sum(outcomes.values()) != len(messages):
        print("ERROR: the ledger group did not process every event exactly once",
              file=sys.stderr)
        return 1
    print("load average after: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    print(f"ledger: {steady:,.0f} events/s")
    print(f"per-event baseline: {baseline:,.0f} events/s")
    print(f"ratio: {steady / baseline:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
