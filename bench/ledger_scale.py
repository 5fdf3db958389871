"""Ledger throughput against the number of processes in the group: bench/ledger_bench.py
run once per process count, its results file read (the group's rate and the per-event
baseline at the same process count), the figures written as JSON for bench/report.py.

    make bench-ledger-scale   (or: python bench/ledger_scale.py --processes 1 2 3 --events 30000)

There is no scale benchmark of its own yet: this is bench-ledger as it stands, repeated.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import results  # bench/, on sys.path as the script's folder


def one_run(processes: int, events: int, baseline_events: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ledger.json"
        cmd = [sys.executable, str(Path(__file__).with_name("ledger_bench.py")),
               "--processes", str(processes), "--events", str(events),
               "--baseline-events", str(baseline_events), "--results", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        sys.stdout.write(done.stdout)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"ledger_bench.py --processes {processes} failed:\n"
                             f"{done.stderr[-2000:]}")
        figures = json.loads(out.read_text())["figures"]
    return {"ledger": float(figures["ledger"]), "baseline": float(figures["baseline"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--events", type=int, default=30_000)
    ap.add_argument("--baseline-events", type=int, default=2_000)
    ap.add_argument("--results", metavar="FILE")
    args = ap.parse_args()
    runs = {}
    for n in args.processes:
        print(f"== {n} ledger process(es), {args.events:,} events", flush=True)
        runs[str(n)] = one_run(n, args.events, args.baseline_events)
    results.write(args.results, "ledger-scale", "a one-transaction-per-event applier on "
                  f"the first {args.baseline_events:,} of the same events, each run",
                  {"events": args.events, "runs": runs})


if __name__ == "__main__":
    main()
