"""Merchant API benchmark: GET /v1/users/{id}/balances at saturation and at a fixed
1,000 req/s, next to a bare FastAPI endpoint doing one database read (bench/
api_baseline.py), both served the same way, in the same run, phases alternated.

    PYTHONPATH=. .venv/bin/python bench/api_bench.py [--duration 10] [--rate 1000]

Targets (issue 18): the API's saturated throughput >= 60 % of the bare endpoint's, and
its p99 <= 20 ms at 1,000 req/s. Tenancy: the p99 at 1,000 req/s with the merchants'
tenancy check (migration 0033's row-level security) no more than 10 % above the same
API's without it: the same server, its phases alternated with the policies' tables'
row-level security disabled (the connections stay open; it is enabled again however
the run ends). Saturation load comes from wrk (bench/wrk_load.py, a
few us of CPU per request); the fixed rate from an open-loop aiohttp generator in a
child process that measures every request from its scheduled send time (no coordinated
omission). Needs the stack's Postgres (`paystream stack up`). The machine is shared:
every line carries the load average, and each saturation phase the CPU it cost per
request in the server, in Postgres (the stack's postmaster and its children) and in
wrk, from /proc: figures that other load on the machine disturbs far less than req/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cpu_usage  # noqa: E402
import per_event_ledger  # noqa: E402
from ingest_bench import MAX_LAG_S, REQUEST_TIMEOUT_S, Result, load_average  # noqa: E402
from wrk_load import run_wrk  # noqa: E402

from paystream.schema.db import connect, database_url, where  # noqa: E402
from paystream.schema.events import EventType, PaymentEvent  # noqa: E402
from paystream.stack.settings import StackSettings  # noqa: E402
from tests.support.api import api_server, bearer, new_key  # noqa: E402
from tests.support.consumers import create_users, store_events  # noqa: E402
from tests.support.ingest import ingest_server  # noqa: E402

TARGET_SHARE = 0.60
TARGET_P99_MS = 20.0
TARGET_TENANCY_COST = 0.10  # at most 10 % more p99 with the tenancy check
ASSETS = ("EUR", "USD", "USDC")


def seed_user() -> str:
    """A user with a balance in each asset, put there by the ledger's own rules: deposits
    recorded as the ingest records them, then applied one transaction each by the
    ledger bench's per-event applier (journal, postings and balance together). Rows
    written straight into balances would leave `paystream reconcile` a mismatch for
    every later run to report."""
    user = "bench-api-" + uuid.uuid4().hex[:8]
    deposits = [PaymentEvent(f"{user}-{asset}", EventType.DEPOSIT, user, asset,
                             Decimal(f"{n + 1}00.25"), "bench")
                for n, asset in enumerate(ASSETS)]
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            create_users(cur, [user])
            store_events(cur, deposits)
    finally:
        conn.close()
    ledger = connect(database_url("ledger"))
    try:
        for event in deposits:
            per_event_ledger.apply_one(ledger, event)
    finally:
        ledger.close()
    return user


async def _open_loop(url: str, headers: dict[str, str], rate: float, count: int
                     ) -> tuple[int, int, int, float, list[float]]:
    import aiohttp

    latencies: list[float] = []
    counters = {"ok": 0, "errors": 0}
    connector = aiohttp.TCPConnector(limit=256)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     headers=headers) as session:

        async def one(scheduled: float) -> None:
            try:
                async with session.get(url) as answer:
                    await answer.read()
                    good = answer.status == 200
            except (TimeoutError, aiohttp.ClientError):
                good = False
            latencies.append((time.perf_counter() - scheduled) * 1000)
            counters["ok" if good else "errors"] += 1

        in_flight: set[asyncio.Task[None]] = set()
        began = time.perf_counter()
        for i in range(count):  # each send created at its scheduled time (ingest_bench)
            scheduled = began + i / rate
            delay = scheduled - time.perf_counter()
            await asyncio.sleep(max(delay, 0))
            if -delay > MAX_LAG_S:
                latencies.append(-delay * 1000)
                counters["errors"] += 1
                continue
            task = asyncio.create_task(one(scheduled))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        while in_flight:
            await asyncio.gather(*in_flight)
        elapsed = time.perf_counter() - began
    return count, counters["ok"], counters["errors"], elapsed, latencies


def _generator(url: str, headers: dict[str, str], rate: float, count: int, conn) -> None:
    conn.send(asyncio.run(_open_loop(url, headers, rate, count)))
    conn.close()


def fixed_rate(label: str, url: str, headers: dict[str, str], rate: float,
               duration: float) -> Result:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_generator, args=(url, headers, rate, int(rate * duration),
                                                child))
    proc.start()
    sent, ok, errors, seconds, latencies = parent.recv()
    proc.join(timeout=60)
    return Result(label, sent, ok, errors, seconds, latencies, load=load_average())


@dataclass(frozen=True)
class CpuPerRequest:
    """CPU microseconds one answered request cost each side of a saturation phase."""

    server: float
    postgres: float
    wrk: float

    def text(self) -> str:
        return (f"server {self.server:.0f} us, postgres {self.postgres:.0f} us,"
                f" wrk {self.wrk:.0f} us")


def saturation(label: str, url: str, headers: dict[str, str], connections: int,
               duration: float, server_pid: int, pgdata: Path
               ) -> tuple[Result, CpuPerRequest]:
    before = (cpu_usage.tree_seconds(server_pid), cpu_usage.postgres_seconds(pgdata),
              _children_seconds())
    done = run_wrk(url, [(b"", headers)], connections, duration, method="GET")
    after = (cpu_usage.tree_seconds(server_pid), cpu_usage.postgres_seconds(pgdata),
             _children_seconds())
    per = [(b - a) / max(done.answered, 1) * 1e6 for a, b in zip(before, after, strict=True)]
    return (Result(label, done.answered, done.ok, done.errors, done.seconds, [],
                   load=load_average(), percentiles={0.50: done.p50_ms, 0.99: done.p99_ms}),
            CpuPerRequest(*per))


@contextlib.contextmanager
def tenancy(enabled: bool) -> Iterator[None]:
    """Row-level security on the tables 0033's policies guard, as `enabled` says, for
    the block; on again after it whatever happens."""
    conn = connect(database_url("owner"))
    conn.autocommit = True

    def switch(on: bool) -> None:
        with conn.cursor() as cur:
            cur.execute("SELECT DISTINCT tablename FROM pg_policies"
                        " WHERE policyname = 'merchant_only' ORDER BY 1")
            for (table,) in cur.fetchall():
                cur.execute(f"ALTER TABLE {table} {'ENABLE' if on else 'DISABLE'}"
                            " ROW LEVEL SECURITY")

    try:
        switch(enabled)
        yield
    finally:
        switch(True)
        conn.close()


def _children_seconds() -> float:
    """CPU seconds of this process's finished children: wrk, once it has exited."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--rate", type=float, default=1000.0, help="fixed rate, req/s")
    parser.add_argument("--concurrency", type=int, default=32, help="connections (wrk)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers per server")
    args = parser.parse_args()

    user = seed_user()
    headers = bearer(new_key("read", name="bench")[1])
    pgdata = StackSettings.from_env().pg_data
    quiet = {"PAYSTREAM_LOG_LEVEL": "WARNING"}
    print(f"api benchmark: load average {load_average()} at start, {os.cpu_count()} CPUs,"
          f" {args.workers} uvicorn worker(s), {args.duration:.0f} s per phase,"
          f" {args.rounds} round(s), c{args.concurrency} at saturation (wrk)")
    print(f"database: {where(database_url('api'))}")
    with ingest_server(quiet, workers=args.workers, app="bench.api_baseline:create_bare_app",
                       log_path=Path("/tmp/api-bench-bare.log")) as bare, \
            api_server({**quiet, "PAYSTREAM_API_RATE_PER_SECOND": "1000000",
                        "PAYSTREAM_API_RATE_BURST": "1000000"}, workers=args.workers) as api:
        path = f"/v1/users/{user}/balances"
        sides = {"bare FastAPI + 1 read": (bare.url + path, bare.process.pid),
                 "api balances": (api.url + path, api.process.pid)}
        for url, pid in sides.values():  # warm-up: connections open, code paths hot
            saturation("warm-up", url, headers, 8, 2, pid, pgdata)
        sat: dict[str, list[Result]] = {side: [] for side in sides}
        cpu: dict[str, list[CpuPerRequest]] = {side: [] for side in sides}
        rate: dict[str, list[Result]] = {side: [] for side in sides}
        plain_cpu: list[CpuPerRequest] = []
        for n in range(args.rounds):
            for side, (url, pid) in sides.items():
                result, used = saturation(f"{side}, saturation #{n + 1}", url, headers,
                                          args.concurrency, args.duration, pid, pgdata)
                sat[side].append(result)
                cpu[side].append(used)
                print(f"{result.line().split('  cdc wait')[0]}  cpu/req: {used.text()}",
                      flush=True)
            with tenancy(enabled=False):
                result, used = saturation(
                    f"api balances without tenancy, saturation #{n + 1}",
                    sides["api balances"][0], headers, args.concurrency, args.duration,
                    sides["api balances"][1], pgdata)
            plain_cpu.append(used)
            print(f"{result.line().split('  cdc wait')[0]}  cpu/req: {used.text()}",
                  flush=True)
        untenanted: list[Result] = []
        for n in range(args.rounds):
            for side, (url, _pid) in sides.items():
                rate[side].append(fixed_rate(f"{side}, {args.rate:.0f} req/s #{n + 1}", url,
                                             headers, args.rate, args.duration))
                print(rate[side][-1].line().split("  cdc wait")[0], flush=True)
            with tenancy(enabled=False):
                untenanted.append(fixed_rate(
                    f"api balances without tenancy, {args.rate:.0f} req/s #{n + 1}",
                    sides["api balances"][0], headers, args.rate, args.duration))
            print(untenanted[-1].line().split("  cdc wait")[0], flush=True)
    bare_rps = statistics.median(r.rps for r in sat["bare FastAPI + 1 read"])
    api_rps = statistics.median(r.rps for r in sat["api balances"])
    p99 = statistics.median(r.pct(0.99) for r in rate["api balances"])
    bare_p99 = statistics.median(r.pct(0.99) for r in rate["bare FastAPI + 1 read"])
    share = api_rps / bare_rps if bare_rps else 0.0
    bare_cpu, api_cpu = (_median_cpu(cpu[side]) for side in sides)
    print()
    print(f"saturation (median over {args.rounds} round(s)): bare {bare_rps:.0f} req/s,"
          f" api {api_rps:.0f} req/s")
    print(f"cpu per request (medians): bare {bare_cpu.text()}; api {api_cpu.text()}")
    every = ((bare_cpu.server + bare_cpu.postgres + bare_cpu.wrk)
             / (api_cpu.server + api_cpu.postgres + api_cpu.wrk))
    print(f"  bare / api cpu per request: server {bare_cpu.server / api_cpu.server:.0%},"
          f" server + postgres + wrk {every:.0%} (with nothing else on the machine the"
          " throughput share lies between the two: the first if the one-process server"
          " is the bottleneck, the second if both cores are busy)")
    print(f"throughput at saturation: {share:.0%} of the bare endpoint (target >= "
          f"{TARGET_SHARE:.0%}): {'MET' if share >= TARGET_SHARE else 'NOT MET'}")
    print(f"p99 at {args.rate:.0f} req/s: api {p99:.2f} ms, bare {bare_p99:.2f} ms (target"
          f" <= {TARGET_P99_MS:.0f} ms): {'MET' if p99 <= TARGET_P99_MS else 'NOT MET'}")
    plain_p99 = statistics.median(r.pct(0.99) for r in untenanted)
    cost = p99 / plain_p99 - 1 if plain_p99 else 0.0
    print(f"p99 at {args.rate:.0f} req/s with the tenancy check {p99:.2f} ms, without it"
          f" {plain_p99:.2f} ms: {cost:+.0%} (target <= +{TARGET_TENANCY_COST:.0%}):"
          f" {'MET' if cost <= TARGET_TENANCY_COST else 'NOT MET'}")
    plain = _median_cpu(plain_cpu)
    print(f"cpu per request at saturation without the tenancy check: {plain.text()}; with"
          f" it postgres {api_cpu.postgres / plain.postgres - 1:+.0%}, server"
          f" {api_cpu.server / plain.server - 1:+.0%}")
    print(f"load average at the end: {load_average()}")
    return 0


def _median_cpu(phases: list[CpuPerRequest]) -> CpuPerRequest:
    return CpuPerRequest(*(statistics.median(getattr(p, f) for p in phases)
                           for f in ("server", "postgres", "wrk")))


if __name__ == "__main__":
    sys.exit(main())
