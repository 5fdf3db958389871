"""What a standby costs the ledger and the pipeline, in one run on one stack
(docs/operations.md#a-standby-and-failover): no standby (the baseline), then the same
stack given its synchronous standby (`paystream stack up` with PAYSTREAM_STANDBY=1, as
`make test-cluster` converts its stack), then that standby made asynchronous
(`pg_autoctl set node replication-quorum false`), then synchronous again, then the
standby stopped (a second baseline, on the database the other modes grew). The same
load, the same settings otherwise (synchronous_commit on in all: the commit waits for
the local flush, and with a synchronous standby for its flush too).

Each mode runs the existing benchmarks as they are (bench/cluster_cost.py's kit):
  - bench/ledger_bench.py --ab: the ledger group draining preloaded events; its CPU per
    event, Python and the primary's Postgres (the physical walsender included), medians
    of its warm runs;
  - bench/e2e_latency.py at 500/s: webhook 2xx -> applied p50/p99, lost counted, after
    a short run that is not counted; and the standby server's own CPU over the measured
    run (replaying the ingest's and the ledger's WAL), per applied event.
Prints every figure, the targets (sync <= 1.3x the baseline's ledger CPU per event;
e2e p50 <= 50 ms at 500/s) and the load average (a shared machine's figures are noisy).

    make bench-standby      # a fresh stack of its own, stopped afterwards
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time

from cluster_cost import FIGURES, environment, run_bench  # bench/, the script's folder
from cpu_usage import postgres_seconds

from paystream.chaos import database as db_faults
from paystream.chaos.processes import kill_postmaster
from paystream.launch import paystream_argv
from paystream.stack import postgres, standby
from paystream.stack.process import StackError, read_pid
from paystream.stack.settings import StackSettings

LEDGER_CPU = re.compile(r"cpu/event, median of \d+ warm runs \(target\): python ([\d,.]+) us"
                        r".*?postgres ([\d,.]+) us")
# ledger_bench.py's split of the Postgres CPU by process role (cpu_usage.role_of).
PG_ROLES = re.compile(r"postgres by process, median: (.*)")
PG_ROLE = re.compile(r"(\w+) ([\d,.]+) us")
APPLIED = re.compile(r"offered \d+/s for \d+ s: (\d+) applied")
SYNC_CPU_LIMIT = 1.3  # sync's ledger CPU per event over the baseline's
P50_LIMIT_MS = 50.0
SHOWN = ("synchronous_commit", "synchronous_standby_names", "shared_buffers", "wal_level",
         "wal_log_hints")  # pg_autoctl turns wal_log_hints on (pg_rewind needs it)


def settings_line(s: StackSettings) -> str:
    out = postgres.superuser_sql(s, ";\n".join(f"SHOW {name}" for name in SHOWN))
    return ", ".join(f"{name}={value!r}" for name, value in zip(SHOWN, out.split("\n"),
                                                                    strict=False))


def primary(s: StackSettings) -> StackSettings:
    """The settings on the writable node; node1 (pg_data, whose server's CPU the ledger
    bench reads) must be it."""
    if not s.standby:
        return s
    on = standby.on_primary(s, standby.StandbySettings.from_env())
    if on.pg_port != s.pg_port:
        raise SystemExit(f"node2 (:{on.pg_port}) is the primary: the ledger bench reads "
                         "node1's server; use a fresh stack (make bench-standby)")
    return on


def measure(mode: str, args: argparse.Namespace) -> dict[str, float]:
    s = StackSettings.from_env()
    print(f"\n{mode}: {settings_line(primary(s))} (load {os.getloadavg()[0]:.2f})",
          flush=True)
    out = run_bench("ledger_bench.py", [
        "--ab", "--events", str(args.events), "--rounds", str(args.rounds),
        "--warmup-events", str(args.warmup_events)], {})
    m = LEDGER_CPU.search(out)
    if m is None:
        raise SystemExit(f"ledger_bench.py printed no CPU per event:\n{out[-3000:]}")
    py, pg = (float(g.replace(",", "")) for g in m.groups())
    split = PG_ROLES.search(out)
    roles = {f"  pg {role} us": float(us.replace(",", ""))
             for role, us in PG_ROLE.findall(split.group(1) if split else "")}
    node2 = standby.nodes(s)[1].data if s.standby else None
    e2e = ["--one-at-a-time", "0", "--rates", str(args.rate), "--skip-faults"]
    # Not counted: the first e2e run on a stack paid for what a warm one does not
    # (p50 0.3-1.4 s for the baseline measured first, 72-110 ms after).
    run_bench("e2e_latency.py", [*e2e, "--seconds", str(args.warmup_seconds)], {})
    before = postgres_seconds(node2) if node2 else 0.0
    out = run_bench("e2e_latency.py", [*e2e, "--seconds", str(args.seconds)], {})
    replay = postgres_seconds(node2) - before if node2 else 0.0
    seen = {k: float(m.group(1)) for k, rx in FIGURES.items()
            if k.startswith("e2e rate") and (m := rx.search(out))}
    applied = int(m.group(1)) if (m := APPLIED.search(out)) else 0
    figures = {"ledger python us": py, "ledger postgres us": pg, **roles,
               "ledger us": py + pg,
               "e2e p50 ms": seen.get("e2e rate p50", float("nan")),
               "e2e p99 ms": seen.get("e2e rate p99", float("nan")),
               "e2e lost": seen.get("e2e rate lost", float("nan")),
               "standby server us": replay / applied * 1e6 if applied and node2
               else float("nan")}
    print(f"{mode}: " + ", ".join(f"{k} {v:,.1f}" for k, v in figures.items())
          + f" ({applied} applied at {args.rate:.0f}/s; load {os.getloadavg()[0]:.2f})",
          flush=True)
    return figures


def quorum(on: bool) -> None:
    """The standby into the replication quorum or out of it; waits for the primary's
    synchronous_standby_names to follow."""
    s = StackSettings.from_env()
    standby.set_replication_quorum(s, standby.nodes(s)[1], on)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            names = postgres.superuser_sql(primary(s), "SHOW synchronous_standby_names")
        except StackError:  # the primary in apply_settings a moment: not named writable
            names = None
        if (names is not None and bool(names.strip()) == on
                and standby.settled(s, standby.StandbySettings.from_env())):
            return
        time.sleep(0.5)
    raise SystemExit(f"the standby's replication quorum did not become {on} in 60 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000,
                        help="events of each measured ledger run")
    parser.add_argument("--rounds", type=int, default=2, help="measured ledger runs a mode")
    parser.add_argument("--warmup-events", type=int, default=5_000)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--warmup-seconds", type=float, default=5,
                        help="an e2e run before each measured one, not counted")
    args = parser.parse_args()
    if StackSettings.from_env().standby:
        raise SystemExit("the stack has a standby already: the baseline needs one without "
                         "(make bench-standby starts a fresh stack)")
    print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    figures = {"no standby": measure("no standby", args)}
    with environment({"PAYSTREAM_STANDBY": "1"}):
        started = time.monotonic()
        subprocess.run(paystream_argv("stack", "up"), check=True, stdout=subprocess.DEVNULL)
        print(f"\nstandby added (stack up --standby) in {time.monotonic() - started:.0f} s")
        figures["sync standby"] = measure("sync standby", args)
        quorum(False)
        figures["async standby"] = measure("async standby", args)
        quorum(True)
        figures["sync standby (again)"] = measure("sync standby (again)", args)
        stop_standby()
        figures["standby stopped"] = measure("standby stopped", args)
    report(figures, args)


def stop_standby() -> None:
    """The standby's keeper and postmaster stopped (SIGKILL, as chaos/database.py's
    standby-kill): the primary in wait_primary, replicating to no one. The last mode, a
    second baseline measured after the others on the same grown database: the modes run
    in one order, so the sync standby's cost is read against the baseline on each side."""
    s = StackSettings.from_env()
    cfg = standby.StandbySettings.from_env()
    node2 = standby.nodes(s)[1]
    keeper = read_pid(standby.pid_file(s, node2.name))
    if keeper is not None:
        db_faults.kill_tree(keeper)
    pm_file = node2.data / "postmaster.pid"
    if pm_file.exists():
        kill_postmaster(int(pm_file.read_text().split()[0]))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            names = postgres.superuser_sql(primary(s), "SHOW synchronous_standby_names")
            if not names.strip() and any(st.reported == "wait_primary"
                                         for st in standby.states(s, cfg)):
                return
        except StackError:
            pass
        time.sleep(0.5)
    raise SystemExit("the primary did not reach wait_primary within 120 s of the "
                     "standby's stop")


def report(figures: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    names = list(figures)
    print(f"\nper mode (ledger: µs of CPU per event, median of {args.rounds} runs of "
          f"{args.events:,}; e2e at {args.rate:.0f}/s for {args.seconds:.0f} s):")
    print(f"  {'figure':<20}" + "".join(f"{name:>22}" for name in names))
    for key in figures[names[0]]:
        print(f"  {key:<20}" + "".join(f"{figures[n].get(key, float('nan')):>22,.1f}"
                                       for n in names))
    # Each sync mode against the baseline measured next to it: the first against no
    # standby (before it), the second against the standby stopped (after it).
    pairs = [("sync standby", "no standby"), ("sync standby (again)", "standby stopped"),
             ("async standby", "no standby")]
    for name, base in pairs:
        if name not in figures or base not in figures:
            continue
        ratio = figures[name]["ledger us"] / figures[base]["ledger us"]
        verdict = ("met" if ratio <= SYNC_CPU_LIMIT else "NOT met") \
            if name.startswith("sync") else ""
        print(f"  {name}: ledger CPU per event {ratio:.2f}x {base}'s"
              + (f" (target <= {SYNC_CPU_LIMIT}x: {verdict})" if verdict else ""))
    for name in names:
        p50 = figures[name]["e2e p50 ms"]
        print(f"  {name}: e2e p50 {p50:.0f} ms (target <= {P50_LIMIT_MS:.0f} ms: "
              f"{'met' if p50 <= P50_LIMIT_MS else 'NOT met'})")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
