"""What a standby costs the ledger and the pipeline, in one run
(docs/operations.md#a-standby-and-failover): two fresh stacks on this machine, measured
in turns. The baseline is a stack without a standby (the `--baseline VAR=VALUE ...`
settings); the other is the current environment's stack with its synchronous standby
(PAYSTREAM_STANDBY=1), measured synchronous and then asynchronous
(`pg_autoctl set node replication-quorum false`). Each round runs: baseline, sync,
baseline, async; so the two databases grow alike, and each standby mode is read against
the baseline measured just before it (a single stack's baseline drifted 2x over one run,
with the database it grew). The same load and settings otherwise (synchronous_commit on
in all: the commit waits for the local flush, and with a synchronous standby for its
flush too).

Each measurement runs the existing benchmarks as they are (bench/cluster_cost.py's kit):
  - bench/ledger_bench.py --ab: the ledger group draining preloaded events; its CPU per
    event, Python and the primary's Postgres (the physical walsender included), medians
    of its warm runs;
  - bench/e2e_latency.py at 500/s: webhook 2xx -> applied p50/p99, lost counted, after
    a short run that is not counted; and the standby server's own CPU over the measured
    run (replaying the ingest's and the ledger's WAL), per applied event.
Prints every figure, the medians per mode, the targets (sync <= 1.3x the baseline's
ledger CPU per event; e2e p50 <= 50 ms at 500/s) and the load average.

    make bench-standby      # two fresh stacks of their own, stopped afterwards
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time

from cluster_cost import FIGURES, environment, run_bench  # bench/, the script's folder
from cpu_usage import postgres_seconds

from paystream.stack import postgres, standby
from paystream.stack.process import StackError
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
    """One mode's figures on the stack of the current environment."""
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
    parser.add_argument("--baseline", nargs="+", required=True, metavar="VAR=VALUE",
                        help="the settings of the stack without a standby")
    parser.add_argument("--turns", type=int, default=2,
                        help="rounds of baseline, sync, baseline, async")
    parser.add_argument("--events", type=int, default=20_000,
                        help="events of each measured ledger run")
    parser.add_argument("--rounds", type=int, default=2, help="measured ledger runs a mode")
    parser.add_argument("--warmup-events", type=int, default=5_000)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--warmup-seconds", type=float, default=5,
                        help="an e2e run before each measured one, not counted")
    parser.add_argument("--stack-warmup-seconds", type=float, default=20,
                        help="an e2e run on each stack before the first turn, not counted")
    args = parser.parse_args()
    baseline = dict(item.split("=", 1) for item in args.baseline)
    if not StackSettings.from_env().standby:
        raise SystemExit("the stack of the environment has no standby (PAYSTREAM_STANDBY=1)")
    with environment(baseline):
        if StackSettings.from_env().standby:
            raise SystemExit("the baseline stack has a standby")
    print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    # Not counted: each stack's first e2e run (its first minutes of traffic) was slow on
    # both sides whatever came before it, and the modes' first turn counted it.
    e2e = ["--one-at-a-time", "0", "--rates", str(args.rate), "--skip-faults", "--seconds",
           str(args.stack_warmup_seconds)]
    with environment(baseline):
        run_bench("e2e_latency.py", e2e, {})
    run_bench("e2e_latency.py", e2e, {})
    runs: list[tuple[str, dict[str, float]]] = []
    for turn in range(1, args.turns + 1):
        for mode in ("sync standby", "async standby"):
            with environment(baseline):
                runs.append(("no standby", measure(f"turn {turn}, no standby", args)))
            if mode == "async standby":
                quorum(False)
            runs.append((mode, measure(f"turn {turn}, {mode}", args)))
            if mode == "async standby":
                quorum(True)
    report(runs, args)


def report(runs: list[tuple[str, dict[str, float]]], args: argparse.Namespace) -> None:
    names = list(dict.fromkeys(name for name, _ in runs))
    keys = list(dict.fromkeys(key for _, f in runs for key in f))
    medians = {name: {key: statistics.median([f.get(key, 0.0) for n, f in runs if n == name])
                      for key in keys} for name in names}
    print(f"\nmedians per mode (ledger: µs of CPU per event, each a median of "
          f"{args.rounds} runs of {args.events:,}; e2e at {args.rate:.0f}/s for "
          f"{args.seconds:.0f} s; {args.turns} turns):")
    print(f"  {'figure':<20}" + "".join(f"{name:>16}" for name in names))
    for key in keys:  # a process role absent from a run (none exited) counts 0 there
        print(f"  {key:<20}" + "".join(f"{medians[n][key]:>16,.1f}" for n in names))
    # Each standby run against the baseline run just before it, then the median ratio.
    for mode in ("sync standby", "async standby"):
        ratios = [f["ledger us"] / runs[i - 1][1]["ledger us"]
                  for i, (name, f) in enumerate(runs) if name == mode]
        shown = ", ".join(f"{r:.2f}x" for r in ratios)
        line = f"  {mode}: ledger CPU per event {statistics.median(ratios):.2f}x the " \
               f"baseline's (median; each turn {shown})"
        if mode.startswith("sync"):
            ok = statistics.median(ratios) <= SYNC_CPU_LIMIT
            line += f" (target <= {SYNC_CPU_LIMIT}x: {'met' if ok else 'NOT met'})"
        print(line)
    for name in names:
        p50 = medians[name]["e2e p50 ms"]
        print(f"  {name}: e2e p50 {p50:.0f} ms (target <= {P50_LIMIT_MS:.0f} ms: "
              f"{'met' if p50 <= P50_LIMIT_MS else 'NOT met'})")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
