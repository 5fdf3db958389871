"""An upgrade under traffic: the previous release runs, signed deposits arrive at a
steady rate, this release's migrations are applied, then every process is replaced by
this release's, one at a time. Prints what a provider and the books saw.

    make bench-upgrade        (a fresh stack of its own; --events sets the history kept)

1. The previous release (the commit before the newest migration, tests/support/
   releases.py, or `--release COMMIT`) brings a fresh stack up: its schema is the old
   one.
2. `--events` stored events with their books are written by COPY-speed SQL
   (bench/console_bench.py's fill, reconcile-clean), and `--attempts` notification
   attempts, so the migrations meet a history.
3. Two ingests and two ledger consumers of the previous release run; a sender offers
   `--rate` signed deposits a second to them, round robin, as a load balancer would:
   a refused connection goes to the other ingest (a provider behind a balancer never
   sees it), an answer is final.
4. This release's migrations are applied (schema.migrate, lock_timeout and retries),
   while a sampler reads, every 50 ms, the longest lock wait on the tables the ingest
   writes (pg_locks.waitstart).
5. Each process is replaced by this release's in turn, with a pause between: an ingest
   is started before the old one leaves the balancer and stops; a ledger joins the
   group before the old one is stopped (SIGTERM: it finishes its batch).
6. The sender stops; every deposit answered 2xx must be applied exactly once (one
   transfer each), and `paystream reconcile` must be clean.

Targets: no answer 5xx other than a 503 (retryable), no 503 run longer than 1 s, the
longest lock wait <= 1 s, lost 0, double 0, reconcile clean. `--blocking` adds, after
this release's migrations, a plain `CREATE INDEX` on payment_events: the one the linter
refuses; it holds a lock that stops the ingest's inserts for as long as the build.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from paystream.launch import paystream_argv
from paystream.schema.db import connect, database_url
from paystream.schema.events import PAYMENTS_TOPIC
from paystream.schema.migrate import apply_pending, migration_files
from tests.support.consumers import ConsumerProcess, start_at_end
from tests.support.ingest import (
    create_users,
    ingest_env,
    ingest_server,
)
from tests.support.releases import Release, previous_release
from tests.support.upgrade import (
    Answer,
    LockSampler,
    Sender,
    books,
    longest_503_run,
    wait_applied,
)

BLOCKING = ("9999_blocking_index",
            "CREATE INDEX bench_blocking_trace ON payment_events (trace_id);")
LOCK_LIMIT_S = 1.0
BURST_LIMIT_S = 1.0


def _old_stack_up(release: Release) -> None:
    print(f"previous release {release.commit[:10]}: stack up (its schema)", flush=True)
    subprocess.run(paystream_argv("stack", "up"), check=True, timeout=900,
                   env={**os.environ, "PYTHONPATH": str(release.view)})


def _fill(events: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from console_bench import fill  # bench/, the script's folder
    fill(events)


def _fill_attempts(n: int) -> None:
    """`n` notification attempts (the table the newest migrations partition), on one
    delivery of the fill's, in the columns every release since 0032 has."""
    conn = connect(database_url("owner"), application_name="bench-upgrade-fill")
    began = time.monotonic()
    try:
        with conn, conn.cursor() as cur:
            cur.execute("INSERT INTO notification_attempts (intent_id, endpoint_id, attempt,"
                        " started_at, latency_s, status_code)"
                        " SELECT d.intent_id, d.endpoint_id, g, now(), 0.1, 500"
                        " FROM (SELECT intent_id, endpoint_id FROM notification_deliveries"
                        " LIMIT 1) d, generate_series(1, %s) g", (n,))
    finally:
        conn.close()
    print(f"  notification_attempts {n:>14,} rows {time.monotonic() - began:6.1f} s")


def _ledger(group: str, logs: Path, env: dict[str, str], name: str) -> ConsumerProcess:
    return ConsumerProcess.start("ledger", topic=PAYMENTS_TOPIC, group=group,
                                 dlq_topic=f"{group}-dlq", log_dir=logs, env=env, name=name)


def _migrate(blocking: bool) -> tuple[list[str], float]:
    files = migration_files() + ([BLOCKING] if blocking else [])
    conn = connect(database_url("owner"), application_name="paystream-migrate")
    began = time.monotonic()
    try:
        return apply_pending(conn, files=files), time.monotonic() - began
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--attempts", type=int, default=1_000_000,
                        help="notification attempts stored (what 0037-0039 partition)")
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--phase-s", type=float, default=10,
                        help="seconds of traffic before, between and after the steps")
    parser.add_argument("--blocking", action="store_true")
    parser.add_argument("--release", help="the old release's commit (default: the one "
                                          "before the newest migration)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-upgrade-"))
    release = previous_release(tmp, args.release)
    new_names = {name + ".sql" for name, _ in migration_files()} - release.migrations
    print(f"migrations this release adds: {', '.join(sorted(new_names))}")
    # Processes start outside the source tree: `python -m` puts the working folder
    # first on the path, and this tree's paystream/ would shadow the old release's.
    os.chdir(tmp)
    old = {"PYTHONPATH": str(release.view)}
    _old_stack_up(release)
    _fill(args.events)
    _fill_attempts(args.attempts)
    users = [f"bench-upgrade-{uuid.uuid4().hex[:6]}-{i}" for i in range(40)]
    create_users(users)
    group = f"bench-upgrade-{uuid.uuid4().hex[:6]}"
    start_at_end(group, PAYMENTS_TOPIC)
    logs = tmp / "logs"
    logs.mkdir()
    sender, sampler = Sender(users, args.rate), LockSampler()
    steps: list[tuple[str, float]] = []
    every: list[ConsumerProcess] = []
    with contextlib.ExitStack() as stack:
        # On the way out, whatever happened: no ledger, sender or sampler left behind.
        stack.callback(lambda: [p.kill() for p in every if p.alive()])
        stack.callback(sampler.stop.set)
        stack.callback(sender.stop.set)
        ingests = [stack.enter_context(contextlib.ExitStack()) for _ in range(2)]
        urls = [ing.enter_context(ingest_server({**ingest_env(), **old},
                                                log_path=logs / f"old-ingest-{i}.log"))
                .url for i, ing in enumerate(ingests)]
        ledgers = [_ledger(group, logs, old, f"old-ledger-{i}") for i in range(2)]
        every.extend(ledgers)
        sender.urls[:] = urls
        threads = [threading.Thread(target=sender.run), threading.Thread(target=sampler.run)]
        for t in threads:
            t.start()
        time.sleep(args.phase_s)
        try:
            applied, took = _migrate(args.blocking)
            steps.append((f"migrations {', '.join(applied) or 'none'}", took))
        except Exception as exc:  # reported, and the run fails on it
            steps.append((f"migrations FAILED: {exc}".strip(), float("nan")))
        time.sleep(args.phase_s)
        for i in range(2):
            began = time.monotonic()
            fresh = stack.enter_context(contextlib.ExitStack())
            url = fresh.enter_context(ingest_server(ingest_env(),
                                                    log_path=logs / f"new-ingest-{i}.log")).url
            sender.urls[i] = url
            ingests[i].close()  # the old one: out of the balancer, then stopped
            steps.append((f"ingest {i} replaced", time.monotonic() - began))
            time.sleep(args.phase_s / 2)
        for i in range(2):
            began = time.monotonic()
            newer = _ledger(group, logs, {}, f"new-ledger-{i}")
            every.append(newer)
            time.sleep(3)  # it joins the group before the old one leaves
            code = ledgers[i].terminate()
            ledgers[i] = newer
            steps.append((f"ledger {i} replaced (old exit {code})", time.monotonic() - began))
            time.sleep(args.phase_s / 2)
        time.sleep(args.phase_s)
        sender.stop.set()
        threads[0].join()
        wait_applied(sender.answers, 120)
        sampler.stop.set()
        threads[1].join()
        for ledger in ledgers:
            ledger.terminate()
    return _report(args, sender.answers, sampler, steps)


def _report(args: argparse.Namespace, answers: list[Answer], sampler: LockSampler,
            steps: list[tuple[str, float]]) -> int:
    statuses: dict[str, int] = {}
    for a in answers:
        key = "no answer" if a.status is None else str(a.status)
        statuses[key] = statuses.get(key, 0) + 1
    server_errors = sum(n for k, n in statuses.items() if k.startswith("5") and k != "503")
    latencies = sorted(a.latency_ms for a in answers if a.status is not None)
    p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else float("nan")
    lost, double = books(answers)
    reconcile = subprocess.run(paystream_argv("reconcile"), capture_output=True, text=True,
                               timeout=600)
    burst = longest_503_run(answers)
    print(f"\n== upgrade under traffic: {args.events:,} events and {args.attempts:,}"
          f" attempts stored, {args.rate:g}/s"
          f"{', with a blocking CREATE INDEX' if args.blocking else ''} ==")
    for name, took in steps:
        print(f"  {name}: {took:.2f} s")
    print(f"answers: {dict(sorted(statuses.items()))}; ingest p50 / p99 / max "
          f"{statistics.median(latencies):.1f} / {p99:.1f} / {latencies[-1]:.1f} ms")
    print(f"longest lock wait on the ingest's tables: {sampler.longest_s:.2f} s"
          f" ({sampler.where or 'none seen'}), target <= {LOCK_LIMIT_S:g} s")
    print(f"5xx other than 503: {server_errors}; longest 503 run {burst:.2f} s,"
          f" target <= {BURST_LIMIT_S:g} s; no answer: {statuses.get('no answer', 0)}")
    print(f"lost {lost}, double {double}; reconcile exit {reconcile.returncode}")
    ok = (not any("FAILED" in name for name, _ in steps) and server_errors == 0
          and burst <= BURST_LIMIT_S and sampler.longest_s <= LOCK_LIMIT_S
          and lost == 0 and double == 0 and reconcile.returncode == 0
          and "no answer" not in statuses)
    print(f"RESULT: {'PASS' if ok else 'FAIL'}")
    if reconcile.returncode != 0:
        print(reconcile.stdout[-2000:] + reconcile.stderr[-2000:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
