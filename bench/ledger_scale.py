"""Ledger scale-out: the `ledger` group with 1, 2, 3 and 6 processes on one 12-partition
topic each, the same events and the same stack, with the CPU of every component.

    make bench-scale   (or: python bench/ledger_scale.py [--processes 1 2 3 6] [--events N])

Each run preloads its own topic with N events of 1,000 users (bench/ledger_bench.py's
mix, every event recorded in payment_events first), starts P `paystream consume ledger`
processes in one group and times the drain from the first committed batch; the CPU per
event of the ledger processes, this stack's Postgres, the brokers and Connect is read
over the drain (Connect's once it has streamed the batches' intents). The baseline is
the same group with one process, measured in the same run: each line prints its
speed-up over it. Kafka, Connect and Postgres run on the same cores as the ledger, so
the curve flattens where the machine's cores run out, not where the design does
(docs/scaling.md reads the figures).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

from bench import results
from bench.ledger_bench import GroupRun, prepare, run_group
from paystream.stack.settings import StackSettings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3, 6])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--batch-size", type=int, default=1_000)
    ap.add_argument("--results", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    if 1 not in args.processes:
        raise SystemExit("--processes must include 1: it is the baseline")
    stack = StackSettings.from_env()
    cores = os.cpu_count() or 1
    print("load average before: {:.1f} {:.1f} {:.1f} ({} cores; Kafka, Connect, Postgres"
          " and anvil running)".format(*os.getloadavg(), cores))
    stamp = f"scale-{int(time.time())}-{random.randrange(1 << 16):04x}"
    runs: dict[int, GroupRun] = {}
    for n in args.processes:
        topic, msgs = prepare(f"{stamp}-p{n}", args.users, args.events, 42 + n, True)
        runs[n] = run_group(topic, f"{stamp}-p{n}-ledger", len(msgs), n, args.batch_size,
                            Path("/tmp") / stamp, stack)
    print("load average after: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    base = runs[1].steady
    print(f"{'processes':>9} {'events/s':>9} {'vs 1':>6} {'busy':>6}  CPU per event (us):"
          " python postgres kafka connect = all")
    for n, run in runs.items():
        per_event = {k: v / args.events * 1e6 for k, v in run.cpu.items()}
        total = sum(per_event.values())
        # Share of the machine the components kept busy while the group drained.
        busy = total * run.steady / 1e6 / cores
        print(f"{n:>9} {run.steady:>9,.0f} {run.steady / base:>5.2f}x {busy:>6.0%}  "
              + " ".join(f"{per_event[k]:,.0f}" for k in ("python", "postgres", "kafka",
                                                          "connect"))
              + f" = {total:,.0f}")
    results.write(args.results, "ledger-scale",
                  "the same group with one process, in the same run",
                  {"events": args.events, "batch_size": args.batch_size, "cores": cores,
                   "runs": {str(n): {"ledger": r.steady, "cpu_us_per_event": {
                       k: v / args.events * 1e6 for k, v in r.cpu.items()}}
                       for n, r in runs.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
