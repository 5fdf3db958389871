"""Machine-readable results of the benchmarks (`--results FILE`), read by
bench/report.py to draw docs/benchmarks/*.png: what ran (the command, the date, the
commit), where (the machine), against what (the baseline), and the figures. Latency
samples are kept as quantiles (0, 0.5, ..., 100 %), which is all a CDF needs."""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUANTILES = [q / 200 for q in range(201)]


def quantiles(values: list[float]) -> list[float]:
    """The values at QUANTILES (nearest rank); empty when there are none."""
    ordered = sorted(values)
    if not ordered:
        return []
    return [ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in QUANTILES]


def machine() -> dict[str, Any]:
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"host": platform.node(), "cpus": os.cpu_count(), "cpu": model,
            "memory_gib": round(mem_gib, 1), "kernel": platform.release(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    return done.stdout.strip() or "?"


def write(path: str | None, bench: str, baseline: str, figures: dict[str, Any]) -> None:
    """Write the results file, when --results named one."""
    if not path:
        return
    doc = {"bench": bench,
           "command": shlex.join([f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
           "date": time.strftime("%Y-%m-%d %H:%M %Z"), "commit": commit(),
           "machine": machine(), "baseline": baseline, "figures": figures}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"results written to {path}")
