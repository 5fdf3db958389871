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

The CPU budget: after a warm-up run that is not counted, the group drains
`--rounds` topics (3); the CPU per event of each component is their median, printed
against its target with the host's pure-Python speed. Then the double-entry ceiling's
work (bench/double_entry_ceiling.py, the shared anchor: claim, lock, transfers and
postings by COPY, balances, statuses, durable commits) runs on the same database, in a
schema of its own, with as many workers and the same batch size, and its Postgres CPU
per event is printed beside ours. `--ab` skips the single-process run, the baselines
and the ceiling: an interleaved A/B runs the bench once per side, alternating.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from bench import cpu_usage, per_event_ledger, results
from paystream.consume import GROUPS
from paystream.schema.db import connect, database_url
from paystream.schema.events import NOTIFICATIONS_TOPIC, EventType, PaymentEvent
from paystream.stack.postgres import OS_USER, superuser_sql
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


# The ledger's --batch-size when none is given.
SHIPPED_BATCH_SIZE: int = GROUPS["ledger"].batch_size


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


def autovacuum_settled(limit_s: float = 120.0) -> None:
    """Wait (up to `limit_s`) until no autovacuum worker runs: one that the previous run's
    writes started would land in the next run's CPU, or in the ceiling's. Each measured
    run starts from this same quiet; what a run's own writes start is its own cost."""
    conn = connect(database_url("owner"))
    conn.autocommit = True
    deadline = time.monotonic() + limit_s
    with conn.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute("SELECT count(*) FROM pg_stat_activity"
                        " WHERE backend_type = 'autovacuum worker'")
            row = cur.fetchone()
            if not row or row[0] == 0:
                break
            time.sleep(0.5)
    conn.close()


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
                    " 'event_status'::regclass, 'processed_events'::regclass,"
                    " 'transfers'::regclass, 'postings'::regclass)")
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
    autovacuum_settled()
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


# The CPU budget, µs of CPU per applied event (2 cores at 20,000 events/s is 100).
TARGETS_US: dict[str, float] = {"python": 30, "postgres": 50, "broker+connect": 20, "all": 100}
CEILING_RATIO_TARGET = 2.0


def budget(cpu: dict[str, float], events: int) -> dict[str, float]:
    """A run's CPU seconds per component as µs per event, in the budget's parts."""
    us = {name: seconds / events * 1e6 for name, seconds in cpu.items()}
    return {**us, "broker+connect": us["kafka"] + us["connect"], "all": sum(us.values())}


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the runs (each on its own: the parts' medians need not
    add up to the median of `all`)."""
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def ceiling_run(stack: StackSettings, workers: int, batch: int, events: int) -> dict:
    """The double-entry ceiling's work on this database (schema `ceiling`, its tables
    created anew), as the cluster's superuser on the socket (its prepare checkpoints);
    its result: us_per_event py / backend / pg_all (every Postgres process, as ours)."""
    script = Path(__file__).with_name("double_entry_ceiling.py")
    autovacuum_settled()
    superuser_sql(stack, "CREATE SCHEMA IF NOT EXISTS ceiling", database=stack.pg_db)
    out_dir = Path(tempfile.mkdtemp(prefix="ceiling-"))
    shutil.chown(out_dir, OS_USER)
    out = out_dir / "ceiling.json"
    dsn = (f"host=/tmp port={stack.pg_port} user={OS_USER} dbname={stack.pg_db}"
           " options='-c search_path=ceiling'")
    try:  # its tables go whatever happens: nothing of the ceiling stays in the database
        done = subprocess.run(
            ["runuser", "-u", OS_USER, "--", sys.executable, str(script), "--dsn", dsn,
             "--init", "--impl", "best", "--batch", str(batch), "--workers", str(workers),
             "--events", str(events), "--json", str(out)],
            capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SystemExit(f"the ceiling run failed:\n{done.stdout}\n{done.stderr}")
        found: dict = json.loads(out.read_text())[-1]
    finally:
        shutil.rmtree(out_dir)
        superuser_sql(stack, "DROP SCHEMA ceiling CASCADE", database=stack.pg_db)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000, help="events of each group run")
    ap.add_argument("--rounds", type=int, default=3,
                    help="measured group runs after the warm-up (their median is the figure)")
    ap.add_argument("--warmup-events", type=int, default=30_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--baseline-events", type=int, default=6_000)
    ap.add_argument("--processes", type=int, default=3, help="ledger processes in the group")
    ap.add_argument("--batch-size", type=int, default=SHIPPED_BATCH_SIZE,
                    help="the ledger's --batch-size (default: the shipped default)")
    ap.add_argument("--ab", action="store_true", help="the group runs only: one side of an"
                    " interleaved A/B (no single-process run, baselines or ceiling)")
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
    warm_topic, warm_msgs = prepare(f"{stamp}-w", args.users, args.warmup_events, 41, True)
    rounds = [prepare(f"{stamp}-g{i}", args.users, args.events, 42 + 10 * i, True)
              for i in range(args.rounds)]
    if not args.ab:
        single_topic, single_msgs = prepare(f"{stamp}-s", args.users, args.events // 2, 43,
                                            True)
        _, base_msgs = prepare(f"{stamp}-b", args.users, args.baseline_events, 44, False)
        _, base1_msgs = prepare(f"{stamp}-c", args.users, args.baseline_events // 2, 45, False)
    size = database_size()
    with OffsetProbe() as probe:
        cdc_settled(probe)
    rest = at_rest(stack)

    log_dir = Path("/tmp") / stamp
    run_group(warm_topic, f"{stamp}-w-ledger", len(warm_msgs), p, args.batch_size, log_dir,
              stack)
    groups = [run_group(topic, f"{stamp}-g{i}-ledger", len(msgs), p, args.batch_size,
                        log_dir, stack) for i, (topic, msgs) in enumerate(rounds)]
    runs: list[tuple[str, list[Message]]] = [(f"{stamp}-w", warm_msgs)]
    runs += [(f"{stamp}-g{i}", msgs) for i, (_, msgs) in enumerate(rounds)]
    if not args.ab:
        single = run_group(single_topic, f"{stamp}-s-ledger", len(single_msgs), 1,
                           args.batch_size, log_dir, stack)
        other0 = components_cpu(stack)
        base, base_py = per_event_ledger.run([m[1] for m in base_msgs], p)
        base_cpu = {"python": base_py, **since(other0, components_cpu(stack))}
        other0 = components_cpu(stack)
        base1, base1_py = per_event_ledger.run([m[1] for m in base1_msgs], 1)
        base1_cpu = {"python": base1_py, **since(other0, components_cpu(stack))}
        ceiling = ceiling_run(stack, p, args.batch_size, args.events)
        runs += [(f"{stamp}-s", single_msgs), (f"{stamp}-b", base_msgs),
                 (f"{stamp}-c", base1_msgs)]

    failed = False
    for run, msgs in runs:
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

    per_run = [budget(g.cpu, args.events) for g in groups]
    roles = medians([{role: seconds / args.events * 1e6
                      for role, seconds in g.postgres_roles.items()} for g in groups])
    mid = medians(per_run)
    rate = statistics.median(g.steady for g in groups)
    print(f"ledger group ({p} processes, batch {args.batch_size}), {args.rounds} runs of"
          f" {args.events:,} events: " + ", ".join(f"{g.steady:,.0f}" for g in groups)
          + f" events/s (median {rate:,.0f})")
    for i, g in enumerate(groups):
        print(cpu_line(f"ledger group run {i + 1}", args.events, g.cpu))
    print(f"cpu/event, median of {args.rounds} warm runs (target): " + ", ".join(
        f"{name} {mid[name]:,.1f} us (<= {target:g} {'met' if mid[name] <= target else 'NOT met'})"
        for name, target in TARGETS_US.items()))
    print("postgres by process, median: " + ", ".join(
        f"{role} {us:,.1f} us" for role, us in roles.items()))
    if not args.ab:
        print(f"ledger single process (batch {args.batch_size}): {single.steady:,.0f}"
              " events/s")
        print(f"per-event baseline, {p} processes: {base:,.0f} events/s")
        print(f"per-event baseline, 1 process: {base1:,.0f} events/s")
        print(f"ratio at {p} processes: {rate / base:.1f}x")
        print(f"ratio at 1 process: {single.steady / base1:.1f}x")
        print(cpu_line("ledger single", len(single_msgs), single.cpu))
        print(cpu_line(f"baseline ({p})", len(base_msgs), base_cpu))
        print(cpu_line("baseline (1)", len(base1_msgs), base1_cpu))
        ceil_us = ceiling["us_per_event"]
        ratio = mid["postgres"] / ceil_us["pg_all"]
        print(f"double-entry ceiling on this database ({p} workers, batch {args.batch_size},"
              f" {ceiling['events']:,} events): {ceiling['ev_s']:,.0f} events/s; cpu/event"
              f" python {ceil_us['py']:,.1f} us, postgres {ceil_us['pg_all']:,.1f} us"
              f" (backends {ceil_us['backend']:,.1f});"
              f" ours {mid['postgres']:,.1f} us = {ratio:.2f}x"
              f" (target <= {CEILING_RATIO_TARGET:g}x"
              f" {'met' if ratio <= CEILING_RATIO_TARGET else 'NOT met'})")
    print("at rest before the runs (5 s, nothing sent): " + ", ".join(
        f"{name} {share:.1%}" for name, share in rest.items())
        + f" of a core; at the group's rate Kafka's and Connect's are"
        f" {cpu_usage.fixed_us_per_event(rest, rate):,.0f} us of its CPU per event")
    print(f"database: ~{size['payment_events'] / 1e6:.1f} M payment events, the ledger tables'"
          f" indexes {size['ledger_index_gib']:.2f} GiB (shared_buffers 1 GB)")
    print("targets: ledger group >= 20x the baseline at equal processes; the CPU budget above")
    figures: dict = {"processes": p, "batch_size": args.batch_size, "events": args.events,
                     "rounds": args.rounds, "ledger": rate,
                     "ledger_runs": [g.steady for g in groups],
                     "cpu_us_per_event": {f"ledger_{name}": us for name, us in mid.items()},
                     "cpu_us_per_event_runs": per_run,
                     "at_rest_core_share": rest, "python_loop_s": loop_s,
                     "interpreter": os.path.realpath(sys.executable), "database": size,
                     "postgres_us_per_event_by_role": roles}
    if not args.ab:
        figures.update(single=single.steady, baseline=base, baseline_single=base1,
                       ceiling=ceiling)
    results.write(args.results, "ledger", f"the per-event double-entry applier with {p}"
                  " process(es) and with 1, on other events of the same mix, and the"
                  " double-entry ceiling's work, in the same run", figures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
