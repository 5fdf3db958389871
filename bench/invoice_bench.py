"""Invoices through the whole pipeline: created at the merchant API, paid by a signed
gateway deposit, told to a real endpoint as `invoice.settled`; against the same
deposits without an invoice (`deposit.credited`), interleaved in the same run.

    make bench-invoices   (or: PYTHONPATH=. .venv/bin/python bench/invoice_bench.py
                           [--rate R] [--seconds S] [--users U] [--timeout T])

Real processes on the running stack, each as `paystream run` starts it: `paystream api`,
`paystream ingest`, `paystream consume ledger` (a group of the bench's own, starting at
the end of paystream.payments), `paystream consume notifier --no-deliver` (a group of its
own at the end of paystream.notifications) with a `paystream notify deliver` beside it
(the notifier's own sender, in a process of its own: `consume notifier` would also run
the reminder scheduler, whose first scan sweeps every open invoice of the stack and
would remind or skip other runs' invoices on a shared stack). A local receiver (aiohttp,
a process of its own) verifies every delivery's signature with the Standard Webhooks
reference library and records (type, invoice id or event id, arrival time); each user
has one endpoint for its one type (`invoice.settled` for the invoice users,
`deposit.credited` for the others), all disabled at the end. Then:
  0. warm-up: a few invoices created and paid and a few plain deposits, until the
     receiver has all of them (every process is up and its group assigned);
  1. creation: POST /v1/invoices (gateway asset USD, an Idempotency-Key each) at R/s
     for S s from a sender process, open loop; latency from each request's scheduled
     send time to its 201 (a late sender does not hide the wait), and the rate achieved;
  2. settlement, R/s in all, alternating: (a) a signed deposit paying one invoice of
     phase 1 in full and naming its `invoice_id`, (b) the same deposit for a user
     without invoices. Latency from the deposit's 2xx to the receiver getting (a)
     `invoice.settled` of that invoice, (b) `deposit.credited` of that deposit. A
     payment whose notification has not arrived `--timeout` s after the last send is
     lost, counted and never dropped from the figures silently;
  3. the plain deposits alone, at the same rate, as many as there were invoices (after
     phase 2, or before it with --alone-first).
Target: invoices add at most 20 % to the p50 of deposit -> notification delivered
(phase 2, (a) against (b)). Both kinds share the ledger's batches and the notifier's
records there, so (a) against (b) is what an invoice costs its own payment (the match
runs in the batch both wait for); phase 3 shows what invoice traffic costs the batches.
Each latency is then split at the ledger's intent (its created_at), the notifier's record
(recorded_at) and the first attempt (started_at), from the database: one host, one clock.
On a shared stack another notifier's sender may take a slot first (senders share the
slots); the split says when the first attempt started, whoever made it. A pid of the
stack's Postgres, broker or Connect that changed under the run (another user injecting
faults) makes the verdict VOID.
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
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import psycopg2
import results  # bench/, on sys.path as the script's folder
from ledger_bench import python_loop_seconds

from paystream.api import keys
from paystream.chaos import processes as px
from paystream.chaos.receiver import LOOPBACK_ENV, LOOPBACK_GUARD
from paystream.ingest import standard_webhooks
from paystream.launch import free_port
from paystream.notify import endpoints
from paystream.schema.db import connect, database_url
from paystream.schema.events import NOTIFICATIONS_TOPIC, PAYMENTS_TOPIC
from paystream.schema.merchants import DEFAULT_MERCHANT
from paystream.schema.users import add_user
from paystream.stack import connect as stack_connect
from paystream.stack import kafka, postgres
from paystream.stack.process import read_pid
from paystream.stack.settings import StackSettings

AMOUNT = "12.50"  # every invoice's amount, and every deposit's: paid in full
# Reminders count only steps after creation (6 h, 3 h, 1 h before the deadline by
# default): a 30-minute deadline has none, and an invoice a lost payment leaves open
# expires on its own.
EXPIRES_IN_S = 1800
SETTLED, CREDITED = "invoice.settled", "deposit.credited"
TARGET_PCT = 20.0
POLL_S = 0.01


def _receiver(port: int, secrets_by_path: dict[str, str], out: mp.Queue) -> None:
    """A merchant's endpoints: verify the signature with the path's secret, record
    (type, invoice id for an invoice.* body else the source event id, arrival), 200;
    401 if it does not verify (the delivery then fails and the payment counts lost)."""
    from aiohttp import web
    from standardwebhooks import Webhook, WebhookVerificationError

    verifiers = {path: Webhook(secret) for path, secret in secrets_by_path.items()}

    async def deliver(request: web.Request) -> web.Response:
        body = await request.read()
        arrived = time.time()
        try:
            verifiers[request.path].verify(body, dict(request.headers))
        except (KeyError, WebhookVerificationError):
            return web.Response(status=401)
        doc = json.loads(body)
        data = doc.get("data", {})
        kind = str(doc.get("type"))
        out.put((kind, data.get("invoice_id") if kind.startswith("invoice.")
                 else data.get("event_id"), arrived))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{tail:.*}", deliver)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def _paced(rate: float, count: int | None, seconds: float | None,
                 one: Callable[[int, float], Awaitable[None]]) -> None:
    """Call `one(n, scheduled)` at `rate` per second (open loop), `count` times or for
    `seconds`, and wait for every call to end."""
    tasks: set[asyncio.Task[None]] = set()
    start = time.monotonic()
    n = 0
    while (count is None or n < count) and (seconds is None
                                            or time.monotonic() - start < seconds):
        scheduled = start + n / rate
        delay = scheduled - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(n, scheduled))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        n += 1
    await asyncio.gather(*tasks)


def _create(url: str, key: str, users: list[str], prefix: str, rate: float,
            count: int | None, seconds: float | None, out: mp.Queue) -> None:
    """POST /v1/invoices at `rate`; puts ("created", invoice id, user, ms from the
    scheduled send to the 201) or ("refused", status, what) per request."""
    async def run() -> None:
        connector = aiohttp.TCPConnector(limit=200)
        timeout = aiohttp.ClientTimeout(total=30)
        headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
            async def one(n: int, scheduled: float) -> None:
                user = users[n % len(users)]
                body = json.dumps({"user_id": user, "asset": "USD", "amount": AMOUNT,
                                   "expires_in_s": EXPIRES_IN_S,
                                   "order_id": f"{prefix}-{n}"})
                try:
                    async with client.post(url, data=body, headers={
                            **headers, "Idempotency-Key": f"{prefix}-{n}"}) as resp:
                        text = await resp.text()
                        took_ms = (time.monotonic() - scheduled) * 1000
                        if resp.status == 201:
                            out.put(("created", json.loads(text)["invoice_id"], user,
                                     took_ms))
                        else:
                            out.put(("refused", resp.status, text[:200]))
                except (TimeoutError, aiohttp.ClientError) as exc:
                    out.put(("refused", 0, repr(exc)[:200]))

            await _paced(rate, count, seconds, one)

    asyncio.run(run())


def _deposit_body(event_id: str, user: str, invoice_id: str | None) -> bytes:
    doc = {"event_id": event_id, "event_type": "deposit", "user_id": user,
           "amount": AMOUNT, "asset": "USD"}
    if invoice_id is not None:
        doc["invoice_id"] = invoice_id
    return json.dumps(doc).encode()


def _pay(url: str, secret: bytes, items: list[tuple[str, str, str | None]], rate: float,
         out: mp.Queue) -> None:
    """Signed gateway deposits (event id, user, invoice id or None) at `rate`, in order;
    puts (event id, 2xx time) per accepted one, (event id, None) per one never accepted.
    A refused or failed attempt is retried, as a provider does."""
    async def run() -> None:
        # aiohttp, as bench/e2e_latency.py: httpx's pool wedged under bursts there.
        connector = aiohttp.TCPConnector(limit=200)
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
            async def one(n: int, _scheduled: float) -> None:
                event_id, user, invoice_id = items[n]
                body = _deposit_body(event_id, user, invoice_id)
                for _attempt in range(60):
                    ts = int(time.time())
                    headers = {"content-type": "application/json",
                               "webhook-id": "msg_" + event_id,
                               "webhook-timestamp": str(ts),
                               "webhook-signature": standard_webhooks.sign(
                                   "msg_" + event_id, ts, body, secret)}
                    try:
                        async with client.post(url, data=body, headers=headers) as resp:
                            await resp.read()
                            if resp.status == 200:
                                out.put((event_id, time.time()))
                                return
                    except (TimeoutError, aiohttp.ClientError):
                        pass
                    await asyncio.sleep(0.5)
                out.put((event_id, None))

            await _paced(rate, len(items), None, one)

    asyncio.run(run())


@dataclass
class Arrivals:
    """What the receiver got: the first arrival of each (type, id)."""

    source: mp.Queue
    first: dict[tuple[str, str], float] = field(default_factory=dict)

    def drain(self) -> None:
        while True:
            try:
                kind, key, at = self.source.get_nowait()
            except queue.Empty:
                return
            self.first.setdefault((kind, key), at)


@dataclass
class Settlement:
    """Phase 2's bookkeeping: each payment's expected notification and its 2xx time."""

    expected: dict[str, tuple[str, str]]  # event id -> (type, id the receiver sees)
    accepted: dict[str, float] = field(default_factory=dict)
    never_accepted: set[str] = field(default_factory=set)

    def take(self, answers: mp.Queue) -> None:
        while True:
            try:
                event_id, at = answers.get_nowait()
            except queue.Empty:
                return
            if at is None:
                self.never_accepted.add(event_id)
            else:
                self.accepted[event_id] = at

    def latencies(self, arrivals: Arrivals, kind: str) -> tuple[list[float], int]:
        """(ms from 2xx to arrival, how many of `kind` are lost: accepted and not
        arrived, or never accepted)."""
        got: list[float] = []
        lost = 0
        for event_id, (k, key) in self.expected.items():
            if k != kind:
                continue
            at = arrivals.first.get((k, key))
            if event_id in self.accepted and at is not None:
                got.append((at - self.accepted[event_id]) * 1000)
            else:
                lost += 1
        return got, lost

    def outstanding(self, arrivals: Arrivals) -> int:
        return sum(1 for e, k in self.expected.items()
                   if e not in self.never_accepted and k not in arrivals.first)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _collect_created(procs: list[mp.Process], out: mp.Queue
                     ) -> tuple[list[tuple[str, str]], list[float], list[tuple[object, ...]]]:
    """Read a creation sender's answers until it ends: (invoice id, user) created, their
    latencies, the refusals."""
    created: list[tuple[str, str]] = []
    latencies: list[float] = []
    refused: list[tuple[object, ...]] = []
    while True:
        try:
            item = out.get(timeout=0.2)
        except queue.Empty:
            if not any(p.is_alive() for p in procs):
                break
            continue
        if item[0] == "created":
            created.append((item[1], item[2]))
            latencies.append(item[3])
        else:
            refused.append(item)
    for p in procs:
        p.join(5)
    return created, latencies, refused


def _settle(pay_url: str, secret: bytes, items: list[tuple[str, str, str | None]],
            expected: dict[str, tuple[str, str]], rate: float, arrivals: Arrivals,
            timeout_s: float) -> tuple[Settlement, float]:
    """Send `items` at `rate` from a sender process and wait until every accepted
    payment's notification arrived, or `timeout_s` after the last send. Returns the
    bookkeeping and the seconds from the last send to the end of the wait."""
    answers: mp.Queue = mp.Queue()
    book = Settlement(expected)
    proc = mp.Process(target=_pay, args=(pay_url, secret, items, rate, answers))
    proc.start()
    last_send: float | None = None
    while True:
        book.take(answers)
        arrivals.drain()
        if last_send is None and not proc.is_alive():
            last_send = time.monotonic()
            book.take(answers)
        if last_send is not None and (book.outstanding(arrivals) == 0
                                      or time.monotonic() - last_send > timeout_s):
            break
        time.sleep(POLL_S)
    proc.join(5)
    return book, time.monotonic() - (last_send or time.monotonic())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0,
                        help="invoices created per second; payments per second in all")
    parser.add_argument("--seconds", type=float, default=15.0,
                        help="phase 1's length; phase 2 pays every invoice it made")
    parser.add_argument("--users", type=int, default=20,
                        help="invoice users, and as many users paid without invoices")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds after the last send before a payment counts as lost")
    parser.add_argument("--alone-first", action="store_true",
                        help="the plain deposits alone (phase 3) before phase 2")
    parser.add_argument("--results", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()

    s = StackSettings.from_env()
    run = uuid.uuid4().hex[:8]
    secret = secrets.token_bytes(32)
    api_port, api_admin, ingest_port, ingest_admin, hook_port = (free_port()
                                                                 for _ in range(5))
    log_dir = s.state_dir / "bench-invoices" / run
    log_dir.mkdir(parents=True, exist_ok=True)
    payers = [f"binv-{run}-i{k}" for k in range(args.users)]
    plain = [f"binv-{run}-d{k}" for k in range(args.users)]

    # Users, their endpoints (one type each), an API key.
    ops = connect(database_url("ops"))
    with ops, ops.cursor() as cur:
        for user in payers + plain:
            add_user(cur, user)
        added = [(f"/hook/{user}", *endpoints.add(
                     cur, f"http://127.0.0.1:{hook_port}/hook/{user}", user,
                     [SETTLED if user in payers else CREDITED], guard=LOOPBACK_GUARD))
                 for user in payers + plain]
    owner = connect(database_url("owner"))
    with owner, owner.cursor() as cur:
        made, key = keys.create(cur, f"bench-invoices-{run}",
                                keys.parse_scopes("read,write"), DEFAULT_MERCHANT)

    env = {**os.environ, **s.service_env(), **LOOPBACK_ENV,
           "PAYMENTS_WEBHOOK_SECRET": "whsec_" + base64.b64encode(secret).decode(),
           "ALCHEMY_SIGNING_KEY": secrets.token_hex(32),
           # The door's per-source and per-key limits (100/s by default) would refuse
           # the bench's own rate: raised, as bench/e2e_latency.py raises the ingest's.
           "PAYSTREAM_INGEST_RATE_PER_SECOND": "100000",
           "PAYSTREAM_INGEST_RATE_BURST": "100000",
           "PAYSTREAM_INGEST_ADMIN_PORT": str(ingest_admin),
           "PAYSTREAM_API_RATE_PER_SECOND": "100000", "PAYSTREAM_API_RATE_BURST": "100000",
           "PAYSTREAM_API_ADMIN_PORT": str(api_admin)}
    ledger_group, notifier_group = f"bench-invoices-{run}", f"bench-invoices-notify-{run}"
    kafka.start_group_at_end(ledger_group, PAYMENTS_TOPIC, s.kafka_bootstrap)
    kafka.start_group_at_end(notifier_group, NOTIFICATIONS_TOPIC, s.kafka_bootstrap)
    procs = [
        px.Managed("api", ["api", "--host", "127.0.0.1", "--port", str(api_port)], env,
                   log_dir),
        px.Managed("ingest", ["ingest", "--port", str(ingest_port)], env, log_dir),
        px.Managed("ledger", ["consume", "ledger", "--group", ledger_group,
                              "--metrics-port", "0"], env, log_dir),
        px.Managed("notifier", ["consume", "notifier", "--no-deliver", "--group",
                                notifier_group, "--metrics-port", "0"], env, log_dir),
        px.Managed("sender", ["notify", "deliver"], env, log_dir)]
    delivered: mp.Queue = mp.Queue()
    receiver = mp.Process(target=_receiver, daemon=True, args=(
        hook_port, {path: hook_secret for path, _, hook_secret in added}, delivered))
    arrivals = Arrivals(delivered)
    create_url = f"http://127.0.0.1:{api_port}/v1/invoices"
    pay_url = f"http://127.0.0.1:{ingest_port}/webhooks/payments"
    loads = [_load()]
    loop_s = python_loop_seconds()
    pids = _stack_pids(s)
    try:
        receiver.start()
        for p in procs:
            p.start()
        px.wait_http_ok(f"http://127.0.0.1:{ingest_admin}/readyz", 60)
        px.wait_http_ok(f"http://127.0.0.1:{api_admin}/readyz", 60)
        print(f"{loads[0]}; pure-Python loop of 10 M additions {loop_s:.2f} s;"
              f" logs in {log_dir}", flush=True)

        # 0. Warm-up: every process up, each group assigned, every path once.
        out: mp.Queue = mp.Queue()
        sender = mp.Process(target=_create, args=(create_url, key, payers, f"binv-{run}-w",
                                                  10.0, 10, None, out))
        sender.start()
        warm, _, refused = _collect_created([sender], out)
        if refused or not warm:
            raise SystemExit(f"warm-up invoices refused: {refused[:3]}")
        items, expected = _plan(f"binv-{run}-w", warm, plain)
        book, _ = _settle(pay_url, secret, items, expected, 10.0, arrivals, 120.0)
        if book.outstanding(arrivals):
            raise SystemExit(f"warm-up: {book.outstanding(arrivals)} of {len(items)}"
                             f" notifications never arrived within 120 s (logs in {log_dir})")

        # 1. Creation at the rate, open loop.
        sender = mp.Process(target=_create, args=(create_url, key, payers, f"binv-{run}-c",
                                                  args.rate, None, args.seconds, out))
        started = time.monotonic()
        sender.start()
        created, create_ms, refused = _collect_created([sender], out)
        took = time.monotonic() - started
        loads.append(_load())

        # 2. Every invoice paid, interleaved with as many plain deposits; 3. plain
        # deposits alone at the same rate: the pipeline with no invoice in any batch
        # (phase 2's baseline shares its batches with the invoices' payments). The
        # order may be swapped, to tell the load of the moment from the traffic.
        items, expected = _plan(f"binv-{run}-p", created, plain)
        lone = [(f"binv-{run}-a{n}", plain[n % len(plain)], None)
                for n in range(len(created))]
        for phase in ((3, 2) if args.alone_first else (2, 3)):
            if phase == 2:
                book, drained = _settle(pay_url, secret, items, expected, args.rate,
                                        arrivals, args.timeout)
            else:
                alone, _ = _settle(pay_url, secret, lone,
                                   {e: (CREDITED, e) for e, _, _ in lone}, args.rate,
                                   arrivals, args.timeout)
            loads.append(_load())
        stages = _stages([endpoint_id for _, endpoint_id, _ in added])
    finally:
        for p in reversed(procs):
            p.stop()
        receiver.terminate()
        ops.close()
        owner.close()
        _tidy([endpoint_id for _, endpoint_id, _ in added], made.key_id)
    restarted = [name for name, pid in _stack_pids(s).items() if pid != pids[name]]

    settled, settled_lost = book.latencies(arrivals, SETTLED)
    credited, credited_lost = book.latencies(arrivals, CREDITED)
    added_pct = (pct(settled, 0.5) / pct(credited, 0.5) - 1) * 100
    # Met only with nothing lost (a lost payment is no faster one), and void when the
    # stack restarted a part under the run (another user's fault injection, on a shared
    # stack): those figures measure the recovery.
    verdict = "met" if added_pct <= TARGET_PCT and not (settled_lost or credited_lost) \
        else "missed"
    if restarted:
        verdict = f"VOID, {' and '.join(restarted)} restarted during the run"
        print(f"the stack's {', '.join(restarted)} restarted during the run (pid changed):"
              " the figures below include a recovery; run again", flush=True)
    print(f"invoice creation: p50 {pct(create_ms, 0.5):.0f} ms p99 {pct(create_ms, 0.99):.0f}"
          f" ms ({len(created) / took:.0f}/s)   [{len(created)} created at {args.rate:g}/s"
          f" offered for {args.seconds:g} s, {len(refused)} refused"
          f"{': ' + repr(refused[:2]) if refused else ''}; from the scheduled send]")
    print(f"payment -> invoice.settled delivered: p50 {pct(settled, 0.5):.0f} ms"
          f" p99 {pct(settled, 0.99):.0f} ms   [max {max(settled, default=0):.0f} ms,"
          f" {len(settled)} delivered, lost {settled_lost}]")
    print(f"deposit -> deposit.credited delivered (baseline): p50 {pct(credited, 0.5):.0f}"
          f" ms p99 {pct(credited, 0.99):.0f} ms   [max {max(credited, default=0):.0f} ms,"
          f" {len(credited)} delivered, lost {credited_lost}]")
    print(f"invoices add {added_pct:.0f} % to p50 (target <= {TARGET_PCT:.0f} %): {verdict}")
    print(f"   {args.rate:g} payments/s in all, alternating, {len(items)} sent; drained"
          f" {drained:.1f} s after the last send; never accepted"
          f" {len(book.never_accepted)}; {args.users} + {args.users} users")
    lone_ms, lone_lost = alone.latencies(arrivals, CREDITED)
    when = "before" if args.alone_first else "after"
    print(f"deposit -> deposit.credited delivered, alone (no invoice traffic, just {when}):"
          f" p50 {pct(lone_ms, 0.5):.0f} ms p99 {pct(lone_ms, 0.99):.0f} ms   [max"
          f" {max(lone_ms, default=0):.0f} ms, {len(lone_ms)} delivered, lost {lone_lost}]")
    for q in (0.5, 0.99):
        split = [_split(stages, book, arrivals, SETTLED, q),
                 _split(stages, book, arrivals, CREDITED, q),
                 _split(stages, alone, arrivals, CREDITED, q)]
        print(f"where the time goes, p{q * 100:.0f} of each part, ms (invoice.settled /"
              " deposit.credited beside it / alone): " + "; ".join(
                  f"{name} {' / '.join(f'{part[k]:.0f}' for part in split)}"
                  for k, name in enumerate(STAGES)))
    order = "3, 2" if args.alone_first else "2, 3"
    print(f"   {' -> '.join(loads)} (start, after phase 1, then phases {order});"
          f" {os.cpu_count()} cores; run {run}")
    results.write(args.results, "invoices", "deposit -> deposit.credited delivered, the "
                  "same deposits without an invoice, interleaved in the same run; target: "
                  "invoices add <= 20 % to p50", {
                      "rate": args.rate, "seconds": args.seconds,
                      "creation_ms": results.quantiles(create_ms),
                      "settled_ms": results.quantiles(settled),
                      "credited_ms": results.quantiles(credited),
                      "alone_ms": results.quantiles(lone_ms),
                      "lost": {"settled": settled_lost, "credited": credited_lost,
                               "alone": lone_lost},
                      "added_pct": round(added_pct, 1), "loop_s": round(loop_s, 2)})
    return 0


def _stack_pids(s: StackSettings) -> dict[str, int | None]:
    """The stack's Postgres, broker and Connect pids: one that changed under the run
    restarted (a fault another user injected on a shared stack)."""
    return {"postgres": postgres.pid(s), "kafka": read_pid(kafka.pid_file(s)),
            "connect": read_pid(stack_connect.pid_file(s))}


def _tidy(endpoint_ids: list[str], key_id: str, patience_s: float = 120.0) -> None:
    """Disable the bench's endpoints (no later traffic reaches them) and revoke its key,
    on fresh connections, retried while Postgres is away (a restart under the run)."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            ops = connect(database_url("ops"))
            try:
                with ops, ops.cursor() as cur:
                    cur.execute("UPDATE notification_endpoints SET disabled_at = now(),"
                                " disabled_reason = 'bench over' WHERE endpoint_id = ANY(%s)"
                                " AND disabled_at IS NULL", (endpoint_ids,))
            finally:
                ops.close()
            owner = connect(database_url("owner"))
            try:
                with owner, owner.cursor() as cur:
                    keys.revoke(cur, key_id)
            finally:
                owner.close()
            return
        except psycopg2.Error:
            if time.monotonic() > deadline:
                print(f"could not disable the endpoints {endpoint_ids} nor revoke {key_id}:"
                      " do it by hand (paystream endpoints disable, apikeys revoke)",
                      file=sys.stderr)
                raise
            time.sleep(1)


STAGES = ("2xx -> the ledger's intent", "-> recorded by the notifier",
          "-> the sender's first attempt", "-> received")


def _stages(endpoint_ids: list[str]) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(type, id the receiver sees) -> when the ledger made the intent, the notifier
    recorded it and the sender started its first attempt (epoch s; one host's clock),
    for every delivery to the bench's endpoints."""
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "SELECT i.type, CASE WHEN i.type LIKE 'invoice.%%' THEN"
                " i.data->>'invoice_id' ELSE i.data->>'event_id' END,"
                " extract(epoch FROM i.created_at), extract(epoch FROM i.recorded_at),"
                " extract(epoch FROM a.started_at) FROM notification_deliveries d"
                " JOIN notification_intents i USING (intent_id)"
                " JOIN notification_attempts a ON a.intent_id = d.intent_id"
                " AND a.endpoint_id = d.endpoint_id AND a.attempt = 1"
                " WHERE d.endpoint_id = ANY(%s)", (endpoint_ids,))
            return {(kind, key): (float(made), float(recorded), float(started))
                    for kind, key, made, recorded, started in cur.fetchall()}
    finally:
        conn.close()


def _split(stages: dict[tuple[str, str], tuple[float, float, float]], book: Settlement,
           arrivals: Arrivals, kind: str, q: float) -> list[float]:
    """The quantile `q` of each of STAGES (ms) over `book`'s delivered payments of
    `kind`, each part on its own (they do not add up to the whole's)."""
    parts: list[list[float]] = [[], [], [], []]
    for event_id, (k, key) in book.expected.items():
        times = stages.get((k, key))
        arrived = arrivals.first.get((k, key))
        if k != kind or times is None or arrived is None or event_id not in book.accepted:
            continue
        points = [book.accepted[event_id], *times, arrived]
        for n in range(4):
            parts[n].append((points[n + 1] - points[n]) * 1000)
    return [pct(p, q) for p in parts]


def _plan(prefix: str, invoices: list[tuple[str, str]], plain: list[str]
          ) -> tuple[list[tuple[str, str, str | None]], dict[str, tuple[str, str]]]:
    """Phase 2's deposits, alternating: one paying each invoice in full, one as much for
    a user without invoices; and what the receiver must get for each."""
    items: list[tuple[str, str, str | None]] = []
    expected: dict[str, tuple[str, str]] = {}
    for n, (invoice_id, user) in enumerate(invoices):
        paying, alone = f"{prefix}-i{n}", f"{prefix}-d{n}"
        items += [(paying, user, invoice_id), (alone, plain[n % len(plain)], None)]
        expected[paying] = (SETTLED, invoice_id)
        expected[alone] = (CREDITED, alone)
    return items, expected


if __name__ == "__main__":
    sys.exit(main())
