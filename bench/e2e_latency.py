"""End to end on the local stack: webhook answered 2xx → ledger effect committed.

Runs a real `paystream ingest` and `paystream consume ledger` with `paystream run`'s own
defaults (a fresh group starting at the topic's end, nothing tuned for the bench), and
watches `event_status.status` flip to `applied` with a 10 ms poll (2 ms one at a
time: the resolution of the figures). Phase 1: one webhook at a time (each sent once
the previous one is applied), then signed deposits at each fixed rate from separate
sender processes; an accepted event not applied within `--timeout` s of the last send
is counted lost, never dropped from the figures. Phase 2 injects each fault kind once
under steady load and measures the recovery time: fault → no accepted event older than
0.5 s still unapplied (the lag is back to zero).

`make bench-e2e` runs it; `--one-at-a-time 50 --rates 500 2000 --seconds 20` are the
defaults. Each phase-1 line reads `e2e <rate>: p50 N ms p99 N ms lost N`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing as mp
import os
import queue
import secrets
import time
from collections.abc import Callable

import aiohttp
import httpx
import results  # bench/, on sys.path as the script's folder

from paystream.chaos import processes as px
from paystream.ingest import standard_webhooks
from paystream.launch import free_port
from paystream.schema.db import connect, database_url
from paystream.schema.events import PAYMENTS_TOPIC
from paystream.stack import kafka
from paystream.stack.settings import StackSettings

SENDERS = 2  # sender processes: one asyncio loop tops out near 1,000 requests/s
POLL_S = 0.01
RECOVERY_SPACING_S = 30.0  # between two faults of phase 2


def sender(url: str, secret: bytes, users: list[str], prefix: str, rate: float,
           seconds: float, out: mp.Queue) -> None:
    async def run() -> None:
        # aiohttp, not httpx: httpx's connection pool wedged under bursts with retries
        # here (no request left the client while the server sat idle).
        connector = aiohttp.TCPConnector(limit=200)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
            tasks = set()
            start = time.monotonic()
            n = 0
            while time.monotonic() - start < seconds:
                delay = start + n / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(client, f"{prefix}-{n}", users[n % len(users)]))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
            await asyncio.gather(*tasks)

    async def one(client: aiohttp.ClientSession, event_id: str, user: str) -> None:
        body = json.dumps({"event_id": event_id, "event_type": "deposit", "user_id": user,
                           "amount": "1.25", "asset": "USD"}).encode()
        for _attempt in range(60):
            ts = int(time.time())
            headers = {"content-type": "application/json", "webhook-id": "msg_" + event_id,
                       "webhook-timestamp": str(ts),
                       "webhook-signature": standard_webhooks.sign("msg_" + event_id, ts,
                                                                   body, secret)}
            try:
                async with client.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status == 200:
                        out.put((event_id, time.time()))
                        return
            except (TimeoutError, aiohttp.ClientError):
                pass
            await asyncio.sleep(0.5)  # a provider retries; so do we

    asyncio.run(run())


class Watcher:
    """Collects 2xx answers from the senders and polls the ledger's effect."""

    def __init__(self, answers: mp.Queue) -> None:
        self.answers = answers
        self.pending: dict[str, float] = {}
        self.latencies: list[float] = []
        self.conn = None

    def step(self) -> None:
        while True:
            try:
                event_id, at = self.answers.get_nowait()
            except queue.Empty:
                break
            self.pending[event_id] = at
        if not self.pending:
            return
        try:
            if self.conn is None or self.conn.closed:
                self.conn = connect(database_url("owner"))
                self.conn.autocommit = True
            with self.conn.cursor() as cur:
                cur.execute("SELECT event_id FROM event_status WHERE event_id = ANY(%s)"
                            " AND status = 'applied'", (list(self.pending),))
                now = time.time()
                for (event_id,) in cur.fetchall():
                    self.latencies.append((now - self.pending.pop(event_id)) * 1000)
        except Exception:  # Postgres may be the fault being injected
            self.conn = None

    def backlog(self, older_than_s: float) -> int:
        cutoff = time.time() - older_than_s
        return sum(1 for at in self.pending.values() if at < cutoff)


def start_senders(url: str, secret: bytes, users: list[str], tag: str, rate: float,
                  seconds: float, answers: mp.Queue) -> list[mp.Process]:
    procs = [mp.Process(target=sender, args=(url, secret, users, f"{tag}-{i}",
                                             rate / SENDERS, seconds, answers))
             for i in range(SENDERS)]
    for p in procs:
        p.start()
    return procs


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def one_at_a_time(url: str, secret: bytes, user: str, prefix: str, count: int,
                  timeout_s: float) -> tuple[list[float], int]:
    """Send a webhook, wait until it is applied (2 ms poll), then the next one: the
    latency a lone event sees. Returns the latencies and how many were never applied."""
    latencies: list[float] = []
    conn = connect(database_url("owner"))
    conn.autocommit = True
    try:
        with httpx.Client(timeout=10) as client, conn.cursor() as cur:
            for n in range(count):
                event_id = f"{prefix}-{n}"
                body = json.dumps({"event_id": event_id, "event_type": "deposit",
                                   "user_id": user, "amount": "1.25", "asset": "USD"}).encode()
                ts = int(time.time())
                headers = {"content-type": "application/json", "webhook-id": "msg_" + event_id,
                           "webhook-timestamp": str(ts),
                           "webhook-signature": standard_webhooks.sign("msg_" + event_id, ts,
                                                                       body, secret)}
                if client.post(url, content=body, headers=headers).status_code != 200:
                    raise SystemExit(f"one-at-a-time: {event_id} was not accepted")
                answered = time.time()
                while time.time() - answered < timeout_s:
                    cur.execute("SELECT 1 FROM event_status WHERE event_id = %s"
                                " AND status = 'applied'", (event_id,))
                    if cur.fetchone():
                        latencies.append((time.time() - answered) * 1000)
                        break
                    time.sleep(0.002)
    finally:
        conn.close()
    return latencies, count - len(latencies)


def create_users(run_id: str, count: int = 200) -> list[str]:
    """The users the run's deposits go to, created first: the ledger credits only users
    that exist, the bench's group and the `ledger` group of the next `make run` alike
    (the latter reads the same records on paystream.payments, as duplicates)."""
    users = [f"e2e-{run_id}-u{i}" for i in range(count)]
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO users (user_id) VALUES (%s) ON CONFLICT DO NOTHING",
                            [(u,) for u in users])
    finally:
        conn.close()
    return users


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--one-at-a-time", type=int, default=50, metavar="N",
                        help="webhooks sent one at a time first (0: none)")
    parser.add_argument("--rates", type=float, nargs="+", default=[500, 2000])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--timeout", type=float, default=60,
                        help="seconds after the last send before an event counts as lost")
    parser.add_argument("--fault-rate", type=float, default=200)
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--results", metavar="FILE",
                        help="also write the figures as JSON (bench/report.py plots them)")
    args = parser.parse_args()
    figures: dict[str, object] = {"latency_ms": {}, "recovery_s": {}}

    s = StackSettings.from_env()
    run_id = secrets.token_hex(3)
    secret = secrets.token_bytes(32)
    port, admin_port = free_port(), free_port()
    log_dir = s.state_dir / "bench-e2e" / run_id
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **s.service_env(),
           "PAYMENTS_WEBHOOK_SECRET": "whsec_" + base64.b64encode(secret).decode(),
           "ALCHEMY_SIGNING_KEY": secrets.token_hex(32),
           "PAYSTREAM_INGEST_RATE_PER_SECOND": "100000", "PAYSTREAM_INGEST_RATE_BURST": "100000",
           "PAYSTREAM_INGEST_ADMIN_PORT": str(admin_port)}
    users = create_users(run_id)
    group = f"bench-e2e-{run_id}"
    kafka.start_group_at_end(group, PAYMENTS_TOPIC, s.kafka_bootstrap)
    ingest = px.Managed("ingest", ["ingest", "--port", str(port)], env, log_dir)
    # `paystream run`'s ledger arguments, plus a group of the bench's own (and a shorter
    # session timeout, which only speeds up phase 2's recoveries).
    ledger = px.Managed("ledger", ["consume", "ledger", "--group", group, "--metrics-port", "0",
                                   "--session-timeout-ms", "6000"], env, log_dir)
    ingest.start()
    ledger.start()
    url = f"http://127.0.0.1:{port}/webhooks/payments"
    px.wait_http_ok(f"http://127.0.0.1:{admin_port}/readyz", 60)
    answers: mp.Queue = mp.Queue()
    watcher = Watcher(answers)
    print(f"load average {os.getloadavg()[0]:.2f}; logs in {log_dir}")
    try:
        if args.one_at_a_time:
            lat, lost = one_at_a_time(url, secret, users[0], f"e2e-{run_id}-single",
                                      args.one_at_a_time, args.timeout)
            print(f"e2e one-at-a-time: p50 {pct(lat, 0.5):.0f} ms p99 {pct(lat, 0.99):.0f} ms "
                  f"lost {lost} ({len(lat)} applied, min {min(lat, default=0):.0f} ms)")
            figures["latency_ms"]["one at a time"] = results.quantiles(lat)  # type: ignore[index]
        for rate in args.rates:
            watcher.latencies.clear()
            started = time.monotonic()
            procs = start_senders(url, secret, users, f"e2e-{run_id}-r{int(rate)}", rate,
                                  args.seconds, answers)
            last_send = None
            while any(p.is_alive() for p in procs) or watcher.pending:
                watcher.step()
                time.sleep(POLL_S)
                if last_send is None and not any(p.is_alive() for p in procs):
                    last_send = time.monotonic()
                if last_send is not None and time.monotonic() - last_send > args.timeout:
                    break
            watcher.step()
            lat, lost = watcher.latencies, len(watcher.pending)
            watcher.pending.clear()  # counted: not carried into the next rate
            took = time.monotonic() - started
            print(f"e2e {rate:.0f}/s: p50 {pct(lat, 0.5):.0f} ms p99 {pct(lat, 0.99):.0f} ms "
                  f"lost {lost}")
            figures["latency_ms"][f"{rate:.0f}/s"] = results.quantiles(lat)  # type: ignore[index]
            print(f"  offered {rate:.0f}/s for {args.seconds:.0f} s: {len(lat)} applied "
                  f"({len(lat) / args.seconds:.0f}/s achieved), p95 {pct(lat, 0.95):.0f} ms, "
                  f"max {max(lat, default=0):.0f} ms (drained {took - args.seconds:.1f} s "
                  f"after the last send; load {os.getloadavg()[0]:.2f})")
        if not args.skip_faults:
            figures["recovery_s"] = recoveries(s, ingest, ledger, watcher, url, secret, users,
                                               run_id, args, port)
    finally:
        ledger.stop()
        ingest.stop()
    figures["fault_rate"] = args.fault_rate
    # A recovery loop gives up this long after the fault: a figure at or above it means
    # "not drained in time", not a recovery time.
    figures["recovery_cap_s"] = RECOVERY_SPACING_S - 1
    results.write(args.results, "e2e", "none: the targets (p50 <= 150 ms, p99 <= 500 ms at "
                  "500/s; recovery after a consumer SIGKILL <= 15 s)", figures)


def recoveries(s: StackSettings, ingest: px.Managed, ledger: px.Managed, watcher: Watcher,
               url: str, secret: bytes, users: list[str], run_id: str,
               args: argparse.Namespace, port: int) -> dict[str, float]:
    def restart_ingest() -> None:
        ingest.kill()
        ingest.start()
        px.wait_http_ok(f"http://127.0.0.1:{port}/healthz", 60)

    faults: list[tuple[str, Callable[[], None]]] = [
        ("consumer SIGKILL", lambda: (ledger.kill(), ledger.start())),
        ("connect restart", lambda: (px.kill_connect(s), px.restart_connect(s))),
        ("broker restart", lambda: (px.kill_broker(s), px.restart_broker(s))),
        ("postgres restart", lambda: (px.kill_postgres(s), px.restart_postgres(s))),
        ("ingest restart", restart_ingest),
    ]
    spacing = RECOVERY_SPACING_S
    recovered: dict[str, float] = {}
    procs = start_senders(url, secret, users, f"e2e-{run_id}-faults", args.fault_rate,
                          spacing * (len(faults) + 1), answers=watcher.answers)
    t0 = time.monotonic()
    for n, (name, inject) in enumerate(faults, start=1):
        while time.monotonic() - t0 < n * spacing:
            watcher.step()
            time.sleep(POLL_S)
        at = time.monotonic()
        inject()
        time.sleep(0.5)
        while watcher.backlog(0.5) > 0 or time.monotonic() - at < 1:
            watcher.step()
            time.sleep(POLL_S)
            if time.monotonic() - at > spacing - 1:
                break
        recovered[name] = round(time.monotonic() - at, 2)
        print(f"recovery after {name}: {time.monotonic() - at:.1f} s "
              f"(fault injected and the backlog of accepted events drained, "
              f"at {args.fault_rate:.0f} webhooks/s)")
    # Keep draining their answers while they finish: a process that put data on a queue
    # exits only once it has been read, so a bare join() here waited for ever.
    deadline = time.monotonic() + spacing * 3
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
        watcher.step()
        time.sleep(POLL_S)
    for p in procs:
        if p.is_alive():
            p.terminate()
        p.join(5)
    return recovered


if __name__ == "__main__":
    main()
