"""Ingest benchmark: signed, valid webhooks at saturation and at a fixed 1,000 req/s,
next to a bare FastAPI endpoint served the same way (the ceiling).

    .venv/bin/python bench/ingest_bench.py [--duration 10] [--rate 1000] [--workers 1]

Needs the stack's Postgres (`paystream stack up`). Every request is a distinct, correctly
signed payment webhook, so each one is a real outbox write (and a real Kafka message via
Debezium, which runs on the same machine). The load generator runs in separate
processes; all traffic is on 127.0.0.1 and bounded in count and time.

Latency at the fixed rate is measured from each request's scheduled send time, so a
stalled server cannot hide queueing delay (no coordinated omission).

Both servers run side by side and their phases alternate (`--rounds`), so the machine's
other load, when it changes, hits the bare endpoint and the ingest alike; the verdicts
use the medians. Every phase starts once Debezium has put every event accepted so far on
the topic, so no phase inherits a CDC backlog from the one before (Connect and Kafka
share the 2 cores); each line says how long that wait was (measured: about 0.1 s, CDC
keeps up with the ingest at saturation).

Every delivery is for a user that exists (created before it is sent): the ingest refuses
the events of a user that does not, so the figures include the check that looks the
users up.

Every line carries the load average, and the ingest's lines the
COMMITs Postgres counted during the phase (group commit: well under one per delivery).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import secrets
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import results  # noqa: E402  (bench/, on sys.path as the script's folder)
from cpu_usage import postgres_seconds, tree_seconds  # noqa: E402
from wrk_load import run_wrk  # noqa: E402

from paystream.schema.db import database_url, where  # noqa: E402
from paystream.schema.events import PAYMENTS_TOPIC  # noqa: E402
from paystream.stack.settings import StackSettings  # noqa: E402
from tests.support.ingest import (  # noqa: E402
    create_users,
    ingest_server,
    payment_body,
    payment_headers,
)

TARGET_SHARE = 0.50   # of the bare endpoint's saturated throughput
TARGET_P99_MS = 25.0  # at the fixed rate
PATH = "/webhooks/payments"
REQUEST_TIMEOUT_S = 10  # every request, and so every phase, is bounded in time
MAX_LAG_S = 5.0         # open loop: requests this late are not sent at all
STATS_FLUSH_S = 1.5     # Postgres backends flush their statistics about once a second
CLIENT = {"saturation": "wrk"}  # set from --client in main()
BENCH_USERS = 1000      # deliveries round these users (created before they are sent)


@dataclass
class Result:
    label: str
    sent: int
    ok: int
    errors: int
    seconds: float
    latencies_ms: list[float]
    load: str = ""        # the machine's load average after the phase
    percentiles: dict[float, float] | None = None  # wrk's, when it generated the load
    wraps: int = 0  # times wrk ran out of distinct requests and started over
    cdc_wait_s: float = 0.0  # waited before the phase for CDC to stream the backlog
    commits: int | None = None  # Postgres COMMITs during the phase (pg_stat_database)
    # CPU µs per accepted delivery during the phase: the server's processes, Postgres's.
    cpu_us: tuple[float, float] | None = None

    @property
    def rps(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        if self.percentiles is not None:
            return self.percentiles.get(q, float("nan"))
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def line(self) -> str:
        durability = (f"  commits {self.commits} ({self.commits / self.ok:.3f}/delivery)"
                      if self.commits is not None and self.ok else "")
        cpu = (f"  cpu/delivery python {self.cpu_us[0]:.1f} us postgres {self.cpu_us[1]:.1f} us"
               if self.cpu_us is not None else "")
        return (f"{self.label:<34} {self.rps:>7.0f} req/s  p50 {self.pct(0.50):>7.2f} ms"
                f"  p99 {self.pct(0.99):>7.2f} ms  ok {self.ok}/{self.sent}"
                f"  errors {self.errors}  load {self.load}  cdc wait {self.cdc_wait_s:.1f} s"
                f"{durability}{cpu}")


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def committed_transactions() -> int:
    """The database's COMMIT count so far (every backend, the stack's included).

    Backends report their counters at most once a second, so wait that long first.
    """
    import psycopg2

    time.sleep(STATS_FLUSH_S)
    with psycopg2.connect(database_url("owner")) as conn, conn.cursor() as cur:
        cur.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        count = int(cur.fetchone()[0])
    conn.close()
    return count


class CdcBacklog:
    """Waits until the payments topic holds every event the ingest accepted so far."""

    def __init__(self) -> None:
        from tests.support.consumers import OffsetProbe

        # One client for every poll (a new one per poll costs a SCRAM handshake).
        self._probe = OffsetProbe()
        self.start = self._on_topic()
        self.accepted = 0

    def _on_topic(self) -> int:
        return sum(self._probe.end_offsets(PAYMENTS_TOPIC).values())

    def drain(self, timeout_s: float = 180.0) -> float:
        began = time.monotonic()
        while self._on_topic() - self.start < self.accepted:
            if time.monotonic() - began > timeout_s:
                raise RuntimeError(f"CDC did not catch up in {timeout_s:.0f} s: is the "
                                   "connector RUNNING? (paystream stack status)")
            time.sleep(0.2)
        return time.monotonic() - began


def signed_requests(count: int, tag: str, id_prefix: str | None = None
                    ) -> list[tuple[bytes, dict[str, str]]]:
    """Distinct signed deliveries: each is a new event, so each is a real write (and a
    deposit the ledger of `make run` applies later). Their users are created here: the
    ingest refuses an event of a user that does not exist (422 unknown_user), after
    looking its users up, which every delivery measured here pays for.

    Ids are numbered in a range of this run's own, unless `id_prefix` is given: then each
    event id is that prefix and 32 random hex digits, and each message id (the trace id)
    random, so the inserts land anywhere in the indexes of a history whose ids have that
    form (bench/growth_cost.py's), as providers' ids do."""
    run = uuid.uuid4().hex[:8]
    users = [f"bench-user-{n}" for n in range(min(count, BENCH_USERS))]
    create_users(users)
    out = []
    for n in range(count):
        event_id, msg_id = ((f"bench-{tag}-{run}-{n}", f"msg_{run}_{n}") if id_prefix is None
                            else (id_prefix + secrets.token_hex(16),
                                  f"msg_{secrets.token_hex(16)}"))
        body = payment_body(event_id, users[n % len(users)], f"{n % 997 + 1}.25")
        out.append((body, payment_headers(body, msg_id=msg_id)))
    return out


async def _closed_loop(url: str, reqs: list, concurrency: int, duration: float
                       ) -> tuple[int, int, int, float, list[float]]:
    import aiohttp

    latencies: list[float] = []
    counters = {"sent": 0, "ok": 0, "errors": 0}
    next_index = iter(range(len(reqs)))
    stop_at = time.perf_counter() + duration

    async def worker(session: aiohttp.ClientSession) -> None:
        for i in next_index:
            if time.perf_counter() >= stop_at:
                return
            body, headers = reqs[i]
            started = time.perf_counter()
            counters["sent"] += 1
            try:
                async with session.post(url, data=body, headers=headers) as answer:
                    await answer.read()
                    good = answer.status == 200
            except (TimeoutError, aiohttp.ClientError):
                good = False
            latencies.append((time.perf_counter() - started) * 1000)
            counters["ok" if good else "errors"] += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        began = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - began
    return counters["sent"], counters["ok"], counters["errors"], elapsed, latencies


async def _open_loop(url: str, reqs: list, rate: float, connections: int
                     ) -> tuple[int, int, int, float, list[float]]:
    import aiohttp

    latencies: list[float] = []
    counters = {"ok": 0, "errors": 0}
    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(i: int, scheduled: float) -> None:
            body, headers = reqs[i]
            try:
                async with session.post(url, data=body, headers=headers) as answer:
                    await answer.read()
                    good = answer.status == 200
            except (TimeoutError, aiohttp.ClientError):
                good = False
            latencies.append((time.perf_counter() - scheduled) * 1000)
            counters["ok" if good else "errors"] += 1

        # Each request's task is created at its scheduled time. Creating all of them up
        # front (one gather) made the first ~100 ms of the phase late on the client side
        # and put a 60-170 ms p99 on an endpoint whose p50 is 1 ms. Latency still counts
        # from the scheduled time, so a late send is counted, not hidden.
        in_flight: set[asyncio.Task[None]] = set()
        began = time.perf_counter()
        for i in range(len(reqs)):
            scheduled = began + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                await asyncio.sleep(0)  # behind schedule: let the requests in flight run
            if -delay > MAX_LAG_S:
                # Far behind schedule: the server cannot keep this rate. Count it as an
                # error with its lag instead of running the phase on for minutes.
                latencies.append(-delay * 1000)
                counters["errors"] += 1
                continue
            task = asyncio.create_task(one(i, scheduled))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        while in_flight:
            await asyncio.gather(*in_flight)
        elapsed = time.perf_counter() - began
    return len(reqs), counters["ok"], counters["errors"], elapsed, latencies


def _generator(kind: str, url: str, reqs: list, param: float, duration: float, conn) -> None:
    """Runs in a child process: the load generator never shares a CPU slice with the
    server's event loop."""
    try:
        import uvloop
        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    if kind == "closed":
        conn.send(asyncio.run(_closed_loop(url, reqs, int(param), duration)))
    else:
        conn.send(asyncio.run(_open_loop(url, reqs, param, 256)))
    conn.close()


def run_load(label: str, kind: str, url: str, reqs: list, param: float,
             duration: float, processes: int) -> Result:
    """Split the requests over `processes` generator processes and merge the results.

    Closed-loop (saturation) load comes from wrk unless --client aiohttp was given.
    """
    if kind == "closed" and CLIENT["saturation"] == "wrk":
        done = run_wrk(url, reqs, int(param), duration, threads=processes)
        return Result(label, done.answered, done.ok, done.errors, done.seconds, [],
                      load=load_average(), wraps=done.wraps,
                      percentiles={0.50: done.p50_ms, 0.99: done.p99_ms})
    ctx = multiprocessing.get_context("fork")
    share = len(reqs) // processes
    pipes, children = [], []
    for p in range(processes):
        parent, child = ctx.Pipe(duplex=False)
        part = reqs[p * share:(p + 1) * share]
        proc = ctx.Process(target=_generator, args=(
            kind, url, part, param / processes, duration, child))
        proc.start()
        pipes.append(parent)
        children.append(proc)
    sent = ok = errors = 0
    seconds = 0.0
    latencies: list[float] = []
    for parent, proc in zip(pipes, children, strict=True):
        s, o, e, elapsed, lat = parent.recv()
        proc.join(timeout=60)
        sent, ok, errors = sent + s, ok + o, errors + e
        seconds = max(seconds, elapsed)
        latencies.extend(lat)
    return Result(label, sent, ok, errors, seconds, latencies, load=load_average())


def run_counted(server_pid: int, *args: object) -> Result:
    """run_load, with the COMMITs Postgres counted during the phase and the CPU the
    server and Postgres used (Debezium's walsender streaming the outbox included)."""
    pgdata = StackSettings.from_env().pg_data
    before = committed_transactions()
    cpu_before = tree_seconds(server_pid), postgres_seconds(pgdata)
    result = run_load(*args)  # type: ignore[arg-type]
    cpu_after = tree_seconds(server_pid), postgres_seconds(pgdata)
    result.commits = committed_transactions() - before - 1  # the `before` query's own
    if result.ok:
        result.cpu_us = ((cpu_after[0] - cpu_before[0]) / result.ok * 1e6,
                         (cpu_after[1] - cpu_before[1]) / result.ok * 1e6)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--rate", type=float, default=1000.0, help="fixed rate, req/s")
    parser.add_argument("--concurrency", default="32,256",
                        help="connections at saturation, comma separated: the saturated "
                             "throughput is the best of them (a server whose answers wait "
                             "for a commit needs more connections to be kept busy)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers per server")
    parser.add_argument("--generators", type=int, default=1,
                        help="load generator processes")
    parser.add_argument("--client", choices=("wrk", "aiohttp"), default="wrk",
                        help="load generator at saturation (the fixed rate always uses the "
                             "aiohttp open-loop generator, which schedules every send)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="bare/ingest alternations per phase (medians are reported)")
    parser.add_argument("--results", metavar="FILE",
                        help="also write the figures as JSON (bench/report.py plots them)")
    parser.add_argument("--rate-only", action="store_true",
                        help="only the fixed-rate phases (bench/growth_cost.py's figures)")
    parser.add_argument("--id-prefix", metavar="PREFIX",
                        help="fixed-rate deliveries' event ids: PREFIX and random hex, spread "
                             "over a history of such ids (default: numbered, a range of "
                             "their own)")
    args = parser.parse_args()
    CLIENT["saturation"] = args.client

    env = {  # the server finds its own role's DSN (paystream_ingest), as in production
           # The benchmark measures the pipeline, not the limiter.
           "PAYSTREAM_INGEST_RATE_PER_SECOND": "1000000",
           "PAYSTREAM_INGEST_RATE_BURST": "1000000"}
    for name in ("PAYSTREAM_INGEST_DB_WRITERS", "PAYSTREAM_INGEST_COMMIT_BATCH_MAX",
                 "PAYSTREAM_INGEST_COMMIT_LINGER_MS", "PAYSTREAM_LOG_LEVEL"):
        if os.environ.get(name):  # pass the group commit knobs through, for comparisons
            env[name] = os.environ[name]
    print(f"ingest benchmark: load average {load_average()} at start, {os.cpu_count()} CPUs,"
          f" {args.workers} uvicorn worker(s), {args.generators} load generator"
          f" process(es), {args.duration:.0f} s per phase, {args.rounds} round(s),"
          f" saturation load from {args.client}")
    print(f"database: {where(database_url('ingest'))} (Kafka and Connect of the stack "
          "run on the same machine)")
    # Both servers run for the whole benchmark and their phases alternate, so a change
    # in the machine's other load (it is shared) hits both sides alike.
    with ingest_server({"PAYSTREAM_LOG_LEVEL": "WARNING"}, workers=args.workers,
                       app="bench.ingest_baseline:create_bare_app") as bare, \
            ingest_server(env, workers=args.workers,
                          log_path=Path("/tmp/ingest-bench.log")) as ingest:
        sides = {"bare FastAPI": bare.url + PATH, "ingest /webhooks/payments": ingest.url + PATH}
        cdc = CdcBacklog()
        for side, url in sides.items():
            warm_reqs = signed_requests(500, f"warm-{side[:4]}")
            warm = run_load("warm-up", "closed", url, warm_reqs, 8, 2, 1)
            if side.startswith("ingest"):
                # wrk starts the list over when it runs out: the replays are duplicates.
                cdc.accepted += len(warm_reqs) if warm.wraps else warm.ok

        def measured(side: str, *load_args: object) -> Result:
            waited = cdc.drain()
            result = (run_counted(ingest.process.pid, *load_args) if side.startswith("ingest")
                      else run_load(*load_args))  # type: ignore[arg-type]
            result.cdc_wait_s = waited
            if side.startswith("ingest"):
                if result.wraps:  # a replayed delivery is a duplicate, not a write
                    raise RuntimeError(f"{result.label}: wrk ran out of distinct requests")
                cdc.accepted += result.ok
            print(result.line(), flush=True)
            return result

        sat: dict[str, list[Result]] = {side: [] for side in sides}
        rate: dict[str, list[Result]] = {side: [] for side in sides}
        levels = [int(c) for c in args.concurrency.split(",")]
        best: dict[str, list[Result]] = {side: [] for side in sides}
        for n in range(0 if args.rate_only else args.rounds):
            for side, url in sides.items():
                for level in levels:
                    sat[side].append(measured(
                        side, f"{side}, saturation c{level} #{n + 1}", "closed", url,
                        signed_requests(int(args.duration * 15000), f"sat{n}-{level}"),
                        level, args.duration, args.generators))
                best[side].append(max(sat[side][-len(levels):], key=lambda r: r.rps))
        for n in range(args.rounds):
            for side, url in sides.items():
                rate[side].append(measured(
                    side, f"{side}, {args.rate:.0f} req/s #{n + 1}", "open", url,
                    signed_requests(int(args.duration * args.rate), f"rate{n}",
                                    args.id_prefix),
                    args.rate, args.duration, args.generators))
    ingest_rate = rate["ingest /webhooks/payments"]
    p99 = statistics.median(r.pct(0.99) for r in ingest_rate)
    commits = sum(r.commits or 0 for r in sat["ingest /webhooks/payments"] + ingest_rate)
    delivered = sum(r.ok for r in sat["ingest /webhooks/payments"] + ingest_rate)
    print()
    if not args.rate_only:
        bare_rps = statistics.median(r.rps for r in best["bare FastAPI"])
        ingest_rps = statistics.median(r.rps for r in best["ingest /webhooks/payments"])
        share = ingest_rps / bare_rps
        print(f"saturation (best concurrency of each round, median over {args.rounds} "
              f"round(s)): bare {bare_rps:.0f} req/s, ingest {ingest_rps:.0f} req/s")
        print(f"throughput at saturation: {share:.0%} of the bare endpoint (target >= "
              f"{TARGET_SHARE:.0%}): {'MET' if share >= TARGET_SHARE else 'NOT MET'}")
    print(f"p99 at {args.rate:.0f} req/s: {p99:.2f} ms (target <= {TARGET_P99_MS:.0f} ms): "
          f"{'MET' if p99 <= TARGET_P99_MS else 'NOT MET'}")
    cpu = [r.cpu_us for r in ingest_rate if r.cpu_us is not None]
    if cpu:
        print(f"cpu/delivery at {args.rate:.0f} req/s, median of {len(cpu)}: python "
              f"{statistics.median(c[0] for c in cpu):.1f} us, postgres "
              f"{statistics.median(c[1] for c in cpu):.1f} us")
    print(f"durability: {commits} COMMITs for {delivered} acknowledged deliveries "
          f"({commits / max(delivered, 1):.3f} per delivery; pg_stat_database, the "
          "stack's own transactions included)")
    print(f"load average at the end: {load_average()}")
    results.write(args.results, "ingest", "a bare FastAPI endpoint (bench/ingest_baseline.py) "
                  "served the same way, phases alternated", {
                      "rate": args.rate,
                      # Every round's fixed-rate latencies, pooled, per side.
                      "fixed_rate_ms": {side: results.quantiles(
                          [x for r in rate[side] for x in r.latencies_ms]) for side in sides},
                      "saturation_rps": {side: [r.rps for r in best[side]] for side in sides},
                      "p99_ms_per_round": {side: [r.pct(0.99) for r in rate[side]]
                                           for side in sides}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
