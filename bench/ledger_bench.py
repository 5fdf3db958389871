"""Ledger throughput: the batch consumer group vs a one-transaction-per-event applier.

    make bench-ledger        (or: .venv/bin/python bench/ledger_bench.py [--events N])

Records N events in payment_events as the ingest would (the ledger credits only records
matching their stored event) and preloads a dedicated 12-partition topic with them in
wire format (1,000 users, mixed deposits, airdrops, withdrawals and fees), then times
`paystream consume ledger` processes (one consumer group) draining it into Postgres.
Then the same with one ledger process, and other events of the same mix applied one
transaction per event by the baseline (bench/per_event_ledger.py: the same double-entry
work) with as many processes, then with one; prints the rates, the ratios at equal
process count and the CPU per event of Python and of Postgres. Needs the stack
(`paystream stack up`); Kafka and Connect run during the measurement. Run as root on the
database host (Postgres CPU is read from /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from bench import cpu_usage, per_event_ledger, results
from paystream.consumers.settings import ConsumerSettings
from paystream.schema.db import connect, database_url
from paystream.schema.events import NOTIFICATIONS_TOPIC, EventType, PaymentEvent
from paystream.stack.settings import StackSettings
from tests.support.consumers import (
    ConsumerProcess,
    Message,
    OffsetProbe,
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


# The ledger's --batch-size when none is given (consumers/settings.py).
SHIPPED_BATCH_SIZE: int = ConsumerSettings.__dataclass_fields__["batch_size"].default  # type: ignore[assignment]


def committed_total(probe: OffsetProbe, topic: str) -> int:
    return sum(max(o, 0) for o in probe.committed(topic, range(12)).values())


@dataclass
class GroupRun:
    steady: float        # events/s from the first committed batch to the drained topic
    wall: float          # events/s including process start and group join
    cpu: dict[str, float]  # CPU seconds per component: python (the ledger), postgres,
                           # kafka, connect
    postgres_roles: dict[str, float]  # the postgres seconds by process role (cpu_usage)


def components_cpu(stack: StackSettings) -> dict[str, float]:
    """CPU seconds so far of the stack's Postgres, brokers and Connect worker."""
    return {"postgres": cpu_usage.postgres_seconds(stack.pg_data),
            "kafka": cpu_usage.stack_seconds(stack.run_dir, "kafka"),
            "connect": cpu_usage.stack_seconds(stack.run_dir, "connect")}


def cdc_settled(probe: OffsetProbe, quiet_s: float = 1.5, limit_s: float = 120.0) -> None:
    """Wait until paystream.notifications has not grown for `quiet_s`."""
    deadline = time.monotonic() + limit_s
    last, still_since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = sum(probe.end_offsets(NOTIFICATIONS_TOPIC).values())
        if now != last:
            last, still_since = now, time.monotonic()
        elif time.monotonic() - still_since >= quiet_s:
            return
        time.sleep(0.25)


def since(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in before}


def at_rest(stack: StackSettings, seconds: float = 5.0) -> dict[str, float]:
    """Each component's share of a core while nothing is sent. It is the fixed part of
    the CPU per event printed later: Debezium polls its queue every poll.interval.ms
    (10) and the brokers tick, whatever the rate."""
    before, t = components_cpu(stack), time.perf_counter()
    time.sleep(seconds)
    used, elapsed = since(before, components_cpu(stack)), time.perf_counter() - t
    return {name: cpu / elapsed for name, cpu in used.items()}


def python_loop_seconds(n: int = 10_000_000) -> float:
    """Seconds for a pure-Python loop of `n` additions: the machine's speed of the day.
    The VMs here vary by up to 1.6x from one day to the next on the same code."""
    started, total = time.perf_counter(), 0
    for i in range(n):
        total += i
    return time.perf_counter() - started


def database_size() -> dict[str, float]:
    """The size the ledger's random-key indexes work against (the pool is 1 GB): payment
    events (the planner's estimate, no scan) and the indexes of the ledger's tables."""
    conn = connect(database_url("owner"))
    with conn.cursor() as cur:
        cur.execute("SELECT greatest(reltuples, 0)::bigint FROM pg_class"
                    " WHERE oid = 'payment_events'::regclass")
        row = cur.fetchone()
        cur.execute("SELECT coalesce(sum(pg_relation_size(indexrelid)), 0) FROM pg_index"
                    " WHERE indrelid IN ('payment_events'::regclass,"
                    " 'processed_events'::regclass, 'transfers'::regclass,"
                    " 'postings'::regclass)")
        size = cur.fetchone()
    conn.close()
    return {"payment_events": float(row[0] if row else 0),
            "ledger_index_gib": float(size[0] if size else 0) / 2**30}


def run_group(topic: str, group: str, total: int, processes: int, batch_size: int,
              log_dir: Path, stack: StackSettings) -> GroupRun:
    """The ledger group draining `topic`, timed from the committed offsets.

    The rate is taken from the group's last rebalance on: until every member has its
    partitions one process may work alone (the first to join takes all twelve), and on
    a short run that start-up was up to half of it. `wall` keeps it all, process start
    included."""
    launched = time.perf_counter()
    procs = [ConsumerProcess.start("ledger", topic=topic, group=group, dlq_topic=topic + ".dlq",
                                   log_dir=log_dir, name=f"bench-{i}",
                                   extra_args=["--batch-size", str(batch_size)])
             for i in range(processes)]
    pids = [p.proc.pid for p in procs]
    samples: list[tuple[float, int]] = []  # (time.time(), events committed)
    probe = OffsetProbe(group)  # one client for the whole run (see OffsetProbe)
    try:
        first_at = None
        while True:
            done = committed_total(probe, topic)
            now = time.perf_counter()
            samples.append((time.time(), done))
            if first_at is None and done > 0:
                first_at = now
                py0, other0 = cpu_usage.process_seconds(pids), components_cpu(stack)
                roles0 = cpu_usage.postgres_snapshot(stack.pg_data)
            if done >= total:
                break
            if now - launched > 600 or any(not p.alive() for p in procs):
                raise SystemExit("ledger group did not drain:\n"
                                 + "\n".join(p.tail(10) for p in procs))
            time.sleep(0.05)
        finished = time.perf_counter()
        py1 = cpu_usage.process_seconds(pids)
        # Connect streams the batches' notification intents after they commit: its
        # (and the broker's) share of the work is in once the topic stops growing.
        cdc_settled(probe)
        other1 = components_cpu(stack)
        roles1 = cpu_usage.postgres_snapshot(stack.pg_data)
    finally:
        probe.close()
        for p in procs:
            p.terminate()
    assert first_at is not None
    end_at = samples[-1][0]
    # Members that leave at the end (terminate) hand partitions to the others: later
    # assignments are not the group forming.
    formed = max(last_assignment(p.log_path, end_at) for p in procs)
    start_at, start_done = next(((t, d) for t, d in samples if t >= formed), samples[0])
    start_at = max(start_at, next(t for t, d in samples if d > 0))
    start_done = max(start_done, next(d for t, d in samples if d > 0))
    print(f"  {group}: every member had its partitions {formed - samples[0][0]:.1f} s after"
          f" launch; rate from {start_done:,} of {total:,} events committed")
    return GroupRun((total - start_done) / max(end_at - start_at, 1e-9),
                    total / (finished - launched),
                    {"python": py1 - py0, **since(other0, other1)},
                    cpu_usage.postgres_split(roles0, roles1))


def last_assignment(log_path: Path, before: float) -> float:
    """When the process last logged partitions_assigned before `before` (epoch seconds;
    0 if never)."""
    last = 0.0
    for line in log_path.read_text(errors="replace").splitlines():
        if '"partitions_assigned"' not in line:
            continue
        try:
            stamp = json.loads(line)["timestamp"]
        except (ValueError, KeyError):
            continue
        at = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        if at <= before:
            last = max(last, at)
    return last


def prepare(run: str, users: int, count: int, seed: int, with_topic: bool
            ) -> tuple[str, list[Message]]:
    """`count` events of `users` users recorded as the ingest records them (the ledger
    credits a record only if it matches its stored event), and preloaded on a topic of
    their own when `with_topic`."""
    events = make_stream(run, users, count, seed)
    conn = connect(database_url("owner"))
    conn.autocommit = True
    t = time.perf_counter()
    with conn.cursor() as cur:
        create_users(cur, sorted({e.user_id for e in events}))
        store_events(cur, events)
    conn.close()
    messages = [wire_message(e) for e in events]
    topic = f"{run}.payments"
    if with_topic:
        create_topic(topic)
        produce(topic, messages)
        assert sum(end_offsets(topic).values()) == len(messages)
    print(f"  {run}: {len(events):,} events of {users:,} users recorded"
          + (f" and preloaded on {topic} (12 partitions)" if with_topic else "")
          + f" in {time.perf_counter() - t:.1f} s")
    return topic, messages


def outcomes_of(run: str) -> dict[str, int]:
    conn = connect(database_url("owner"))
    with conn.cursor() as cur:
        cur.execute("SELECT outcome, count(*) FROM processed_events WHERE event_id LIKE %s"
                    " GROUP BY 1", (f"{run}-e%",))
        found = dict(cur.fetchall())
    conn.close()
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--baseline-events", type=int, default=6_000)
    ap.add_argument("--processes", type=int, default=3, help="ledger processes in the group")
    ap.add_argument("--batch-size", type=int, default=SHIPPED_BATCH_SIZE,
                    help="the ledger's --batch-size (default: the shipped default)")
    ap.add_argument("--results", metavar="FILE", help="also write the figures as JSON"
                    " (bench/results.py; bench/ledger_scale.py and bench/report.py read it)")
    args = ap.parse_args()
    stack = StackSettings.from_env()
    p = args.processes

    print("load average before: {:.1f} {:.1f} {:.1f} (2 cores; Kafka, Connect, Postgres"
          " and anvil running)".format(*os.getloadavg()))
    loop_s = python_loop_seconds()
    print(f"machine: a pure-Python loop of 10 M additions takes {loop_s:.2f} s (CPU figures"
          " of days of different speed are not comparable); the ledger processes run"
          f" {os.path.realpath(sys.executable)} {platform.python_version()}")
    stamp = f"bench-{int(time.time())}-{random.randrange(1 << 16):04x}"
    print("preparing (every event in payment_events, status received, as the ingest"
          " leaves it):")
    group_topic, group_msgs = prepare(f"{stamp}-g", args.users, args.events, 42, True)
    single_topic, single_msgs = prepare(f"{stamp}-s", args.users, args.events // 2, 43, True)
    _, base_msgs = prepare(f"{stamp}-b", args.users, args.baseline_events, 44, False)
    _, base1_msgs = prepare(f"{stamp}-c", args.users, args.baseline_events // 2, 45, False)
    size = database_size()
    with OffsetProbe() as probe:
        cdc_settled(probe)
    rest = at_rest(stack)

    group = run_group(group_topic, f"{stamp}-g-ledger", len(group_msgs), p, args.batch_size,
                      Path("/tmp") / stamp, stack)
    single = run_group(single_topic, f"{stamp}-s-ledger", len(single_msgs), 1,
                       args.batch_size, Path("/tmp") / stamp, stack)
    other0 = components_cpu(stack)
    base, base_py = per_event_ledger.run([m[1] for m in base_msgs], p)
    base_cpu = {"python": base_py, **since(other0, components_cpu(stack))}
    other0 = components_cpu(stack)
    base1, base1_py = per_event_ledger.run([m[1] for m in base1_msgs], 1)
    base1_cpu = {"python": base1_py, **since(other0, components_cpu(stack))}

    failed = False
    for run, msgs in ((f"{stamp}-g", group_msgs), (f"{stamp}-s", single_msgs),
                      (f"{stamp}-b", base_msgs), (f"{stamp}-c", base1_msgs)):
        outcomes = outcomes_of(run)
        print(f"check {run}: outcomes {outcomes}")
        if sum(outcomes.values()) != len(msgs):
            print(f"ERROR: {run}: not every event was processed exactly once", file=sys.stderr)
            failed = True
    print("load average after: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))

    def cpu_line(label: str, events: int, cpu: dict[str, float]) -> str:
        parts = [f"{name} {seconds / events * 1e6:,.0f} us" for name, seconds in cpu.items()]
        return (f"cpu/event {label}: " + ", ".join(parts)
                + f"; all {sum(cpu.values()) / events * 1e6:,.0f} us")

    steady_events = len(group_msgs)
    print(f"ledger group ({p} processes, batch {args.batch_size}): {group.steady:,.0f} events/s"
          f" ({group.wall:,.0f} events/s including start and group join)")
    print(f"ledger single process (batch {args.batch_size}): {single.steady:,.0f} events/s")
    print(f"per-event baseline, {p} processes: {base:,.0f} events/s")
    print(f"per-event baseline, 1 process: {base1:,.0f} events/s")
    print(f"ratio at {p} processes: {group.steady / base:.1f}x")
    print(f"ratio at 1 process: {single.steady / base1:.1f}x")
    print(cpu_line(f"ledger group ({p})", steady_events, group.cpu))
    print(cpu_line("ledger single", len(single_msgs), single.cpu))
    print(cpu_line(f"baseline ({p})", len(base_msgs), base_cpu))
    print(cpu_line("baseline (1)", len(base1_msgs), base1_cpu))
    print(f"postgres by process, ledger group ({p}): " + ", ".join(
        f"{role} {seconds / steady_events * 1e6:,.0f} us"
        for role, seconds in group.postgres_roles.items()))
    print("at rest before the runs (5 s, nothing sent): " + ", ".join(
        f"{name} {share:.1%}" for name, share in rest.items())
        + f" of a core; at the group's rate Kafka's and Connect's are"
        f" {cpu_usage.fixed_us_per_event(rest, group.steady):,.0f} us of its CPU per event")
    print(f"database: ~{size['payment_events'] / 1e6:.1f} M payment events, the ledger tables'"
          f" indexes {size['ledger_index_gib']:.2f} GiB (shared_buffers 1 GB)")
    print("targets: ledger group >= 20,000 events/s; >= 20x the baseline at equal processes")
    results.write(args.results, "ledger", f"the per-event double-entry applier with {p}"
                  " process(es) and with 1, on other events of the same mix, in the same run",
                  {"processes": p, "batch_size": args.batch_size, "events": len(group_msgs),
                   "ledger": group.steady, "single": single.steady, "baseline": base,
                   "baseline_single": base1,
                   "cpu_us_per_event": {
                       f"ledger_{name}": seconds / steady_events * 1e6
                       for name, seconds in group.cpu.items()},
                   "at_rest_core_share": rest,
                   "python_loop_s": loop_s,
                   "interpreter": os.path.realpath(sys.executable),
                   "database": size,
                   "postgres_us_per_event_by_role": {
                       role: seconds / steady_events * 1e6
                       for role, seconds in group.postgres_roles.items()}})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
