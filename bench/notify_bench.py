"""Webhook deliveries: the notifier's sender vs a naive one-at-a-time sender, same run.

    make bench-notify   (or: PYTHONPATH=. .venv/bin/python bench/notify_bench.py
                         [--intents N] [--endpoints E] [--senders S] [--rate R]
                         [--duration S])

A local receiver (aiohttp, a process of its own) that verifies every signature with the
Standard Webhooks reference library and answers 200, and E endpoints on it (one user
each, as merchants' endpoints are). Then:
  1. throughput: N intents spread over the endpoints, recorded with their slots
     (notify/slots.py, as the notifier consumer records them), then
     `paystream notify deliver` (--senders processes, the shipped settings) sends them;
     rate = N / (last delivery recorded - first attempt started), from the database;
  2. baseline: other intents sent to one endpoint by a naive sender in this process, one
     at a time: claim the slot, sign, POST (httpx, synchronous), record, commit, next;
  3. latency: the sender running, intents recorded at R per second for S seconds;
     intent created_at -> delivery recorded, p50 / p99 / max.
Targets (issue 15): >= 2,000 deliveries/s; p99 <= 1 s at 200 intents/s. Needs the stack
(`paystream stack up`).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal

import httpx

from paystream import standard_webhooks
from paystream.chaos.receiver import LOOPBACK_ENV, LOOPBACK_GUARD
from paystream.launch import free_port, paystream_argv
from paystream.notify import endpoints, slots
from paystream.notify.intents import IntentType, new_intent, now_text
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.users import add_user


def _receiver(port: int, secrets: dict[str, str]) -> None:
    """What a merchant's endpoint does: verify the signature with the secret of the
    path (the Standard Webhooks reference library, which also parses the body), answer
    200; 401 if it does not verify (the sender gives the slot up and the bench fails)."""
    from aiohttp import web
    from standardwebhooks import Webhook, WebhookVerificationError

    verifiers = {path: Webhook(secret) for path, secret in secrets.items()}

    async def ok(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            verifiers[request.path].verify(body, dict(request.headers))
        except (KeyError, WebhookVerificationError):
            return web.Response(status=401)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{tail:.*}", ok)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _record(conn: Connection, user: str, count: int, tag: str) -> list[str]:
    made = [new_intent(IntentType.DEPOSIT_CREDITED, f"{tag}-{i}", user, event_type="deposit",
                       asset="USD", amount=Decimal(i + 1), created_at=now_text())
            for i in range(count)]
    with conn, conn.cursor() as cur:
        for start in range(0, count, 1000):
            slots.record(cur, [(i, None) for i in made[start:start + 1000]])
    return [i.id for i in made]


def _rate(conn: Connection, ids: list[str]) -> float:
    with conn, conn.cursor() as cur:
        cur.execute("SELECT extract(epoch FROM max(d.delivered_at) - min(a.started_at)),"
                    " count(DISTINCT d.intent_id) FROM notification_deliveries d"
                    " JOIN notification_attempts a USING (intent_id, endpoint_id)"
                    " WHERE d.intent_id = ANY(%s) AND d.state = 'delivered'", (ids,))
        seconds, delivered = cur.fetchone()
    assert delivered == len(ids), f"{delivered} of {len(ids)} delivered"
    return len(ids) / float(seconds)


def _wait_delivered(conn: Connection, endpoint_ids: list[str], timeout_s: float) -> None:
    """Until the endpoints have no pending slot (the partial index: a poll that costs
    Postgres next to nothing, so the bench does not slow what it measures)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM notification_deliveries WHERE endpoint_id ="
                        " ANY(%s) AND state = 'pending'", (endpoint_ids,))
            if cur.fetchone()[0] == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"not every intent delivered within {timeout_s} s")


def _naive(conn: Connection, ids: list[str], url: str, key: bytes) -> float:
    """One slot at a time: claim, sign, POST, record, commit."""
    started = time.perf_counter()
    with httpx.Client(timeout=10) as client:
        for intent_id in ids:
            claim = str(uuid.uuid4())
            with conn, conn.cursor() as cur:
                cur.execute("UPDATE notification_deliveries SET claim_id = %s, attempts = 1,"
                            " claimed_until = now() + interval '60 s' WHERE intent_id = %s"
                            " RETURNING (SELECT data::text FROM notification_intents"
                            " WHERE intent_id = %s)", (claim, intent_id, intent_id))
                body = cur.fetchone()[0].encode()
            headers = standard_webhooks.headers(intent_id, int(time.time()), body, [key])
            t0 = datetime.now(UTC)
            status = client.post(url, content=body, headers=headers).status_code
            with conn, conn.cursor() as cur:
                cur.execute("INSERT INTO notification_attempts (intent_id, endpoint_id,"
                            " attempt, started_at, latency_s, status_code) SELECT intent_id,"
                            " endpoint_id, 1, %s, 0, %s FROM notification_deliveries"
                            " WHERE intent_id = %s", (t0, status, intent_id))
                cur.execute("UPDATE notification_deliveries SET state = 'delivered',"
                            " delivered_at = now(), claimed_until = NULL WHERE intent_id = %s"
                            " AND claim_id = %s", (intent_id, claim))
    return len(ids) / (time.perf_counter() - started)


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--intents", type=int, default=10000)
    parser.add_argument("--baseline-intents", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=8,
                        help="endpoints (one user each) the intents are spread over")
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--senders", type=int, default=1,
                        help="`paystream notify deliver` processes (they share the slots)")
    args = parser.parse_args()

    port = free_port()
    run = uuid.uuid4().hex[:8]
    users = [f"bench-notify-{run}-{k}" for k in range(args.endpoints)]
    ops = connect(database_url("ops"))
    with ops, ops.cursor() as cur:
        for user in users:
            add_user(cur, user)
        added = [endpoints.add(cur, f"http://127.0.0.1:{port}/hook/{k}", user, [],
                               guard=LOOPBACK_GUARD)
                 for k, user in enumerate(users)]
    endpoint_ids = [endpoint_id for endpoint_id, _ in added]
    receiver = mp.Process(target=_receiver, daemon=True, args=(
        port, {f"/hook/{k}": secret for k, (_, secret) in enumerate(added)}))
    receiver.start()
    conn = connect(database_url("notifier"), application_name="paystream-bench-notify")

    def record(count: int, tag: str) -> list[str]:
        """`count` intents spread over the endpoints' users."""
        ids: list[str] = []
        for k, user in enumerate(users):
            ids += _record(conn, user, count // len(users) + (k < count % len(users)),
                           f"{tag}-{k}")
        return ids

    try:
        time.sleep(1.0)  # the receiver's start
        # 2. The baseline first, on its own (nothing else sends meanwhile), to endpoint 0.
        naive_ids = _record(conn, users[0], args.baseline_intents, f"{run}-naive")
        naive_load = _load()
        naive_rate = _naive(conn, naive_ids, f"http://127.0.0.1:{port}/hook/0",
                            standard_webhooks.decode_secret(added[0][1]))
        # 1. Throughput: recorded, then the sender processes (the shipped settings, but
        # the SSRF guard's admitting the receiver on loopback) drain them.
        ids = record(args.intents, f"{run}-burst")
        burst_load = _load()
        senders = [subprocess.Popen(paystream_argv("notify", "deliver"),
                                    env={**os.environ, **LOOPBACK_ENV},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for _ in range(args.senders)]
        try:
            _wait_delivered(conn, endpoint_ids, 300)
            rate = _rate(conn, ids)
            # 3. Latency at a steady rate, the sender running.
            steady: list[str] = []
            tick, started = 0.05, time.monotonic()
            n = 0
            while time.monotonic() - started < args.duration:
                due = int((time.monotonic() - started) * args.rate) - n
                if due > 0:
                    steady += record(due, f"{run}-steady-{n}")
                    n += due
                time.sleep(tick)
            _wait_delivered(conn, endpoint_ids, 120)
            steady_load = _load()
        finally:
            for sender in senders:
                sender.terminate()
            for sender in senders:
                sender.wait(30)
        with conn, conn.cursor() as cur:
            cur.execute("SELECT extract(epoch FROM d.delivered_at - i.created_at)"
                        " FROM notification_deliveries d JOIN notification_intents i"
                        " USING (intent_id) WHERE d.intent_id = ANY(%s)"
                        " AND d.state = 'delivered'", (steady,))
            latencies = sorted(float(row[0]) for row in cur.fetchall())
        assert len(latencies) == len(steady), f"{len(latencies)} of {len(steady)} delivered"
    finally:
        with ops, ops.cursor() as cur:
            for endpoint_id in endpoint_ids:
                endpoints.disable(cur, endpoint_id, "bench over")
        receiver.terminate()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    print(f"deliveries/s   notifier sender x{args.senders} {rate:8.0f}   naive one-at-a-time"
          f" {naive_rate:6.0f}   ratio {rate / naive_rate:.1f}x   ({args.intents} intents over"
          f" {args.endpoints} endpoints and {args.baseline_intents} to one, a local receiver"
          " verifying every signature)")
    print(f"   {_load()} (before the sender: {burst_load}; before the naive: {naive_load})")
    print(f"intent -> delivery at {args.rate:g}/s for {args.duration:g} s ({len(latencies)}"
          f" intents): p50 {p(0.5) * 1000:.0f} ms  p99 {p(0.99) * 1000:.0f} ms"
          f"  max {latencies[-1] * 1000:.0f} ms   ({steady_load})")
    print("targets: >= 2000 deliveries/s, p99 <= 1000 ms at 200 intents/s"
          f"  (machine: {os.cpu_count()} cores; sender settings: the shipped defaults)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
