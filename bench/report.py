"""`make bench-report`: PNG plots under docs/benchmarks/ from the benchmarks' results
files (docs/benchmarks/data/*.json, written by their --results option), each captioned
with the command, the date, the commit, the machine and the baseline.

    python bench/report.py [--data docs/benchmarks/data] [--out docs/benchmarks]

Needs matplotlib (a dev dependency). A results file that is missing is
reported and its plot skipped; the others are still drawn.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from results import QUANTILES  # bench/, the script's folder

ROOT = Path(__file__).resolve().parents[1]


def caption(doc: dict[str, Any]) -> str:
    m = doc["machine"]
    text = (f"{doc['command']} · {doc['date']} · commit {doc['commit']} · "
            f"{m['cpus']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, load "
            f"{' '.join(map(str, m['load_average']))} at the end · baseline: {doc['baseline']}")
    return "\n".join(textwrap.wrap(text, 120))


def figure(doc: dict[str, Any], title: str) -> tuple[Figure, Any]:
    fig, ax = plt.subplots(figsize=(10, 6))
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    fig.text(0.01, 0.01, caption(doc), fontsize=7, va="bottom", family="monospace")
    fig.subplots_adjust(bottom=0.22)
    return fig, ax


def cdf(ax: Any, label: str, values: list[float]) -> None:
    if values:
        ax.plot(values, QUANTILES[: len(values)], label=label, drawstyle="steps-post")


def ingest_plot(doc: dict[str, Any], out: Path) -> None:
    f = doc["figures"]
    fig, ax = figure(doc, f"Ingest latency at {f['rate']:.0f} req/s (open loop, all rounds), "
                          "against the bare endpoint")
    for side, values in f["fixed_rate_ms"].items():
        rps = f["saturation_rps"][side]
        cdf(ax, f"{side} (saturation {max(rps):,.0f} req/s best round)", values)
    ax.set_xscale("log")
    ax.set_xlabel("latency from the scheduled send, ms (log)")
    ax.set_ylabel("fraction of requests answered")
    ax.legend(loc="lower right")
    fig.savefig(out)
    plt.close(fig)


def e2e_plot(doc: dict[str, Any], out: Path) -> None:
    fig, ax = figure(doc, "End to end: webhook 2xx → applied in the ledger, per offered rate")
    for label, values in doc["figures"]["latency_ms"].items():
        cdf(ax, label, values)
    ax.set_xscale("log")
    ax.set_xlabel("latency, ms (log)")
    ax.set_ylabel("fraction of events applied")
    ax.legend(loc="lower right")
    fig.savefig(out)
    plt.close(fig)


def recovery_plot(doc: dict[str, Any], out: Path) -> None:
    f = doc["figures"]
    rec = f["recovery_s"]
    if not rec:
        raise LookupError("the e2e run skipped its faults (--skip-faults)")
    fig, ax = figure(doc, f"Recovery per fault kind at {f['fault_rate']:.0f} webhooks/s: "
                          "fault → no accepted event older than 0.5 s unapplied")
    names = list(rec)
    # Runs before the bench recorded its cap gave up 29 s after the fault (30 s spacing).
    cap = f.get("recovery_cap_s", 29.0)
    capped = [rec[n] >= cap for n in names]
    bars = ax.barh(names, [rec[n] for n in names],
                   color=["tab:gray" if c else "tab:orange" for c in capped],
                   hatch=None)
    for bar, c in zip(bars, capped, strict=True):
        if c:
            bar.set_hatch("//")
    ax.bar_label(bars, labels=[f"≥ {rec[n]:.1f} s, not drained in the window" if c
                               else f"{rec[n]:.1f} s" for n, c in zip(names, capped,
                                                                     strict=True)],
                 padding=3)
    ax.axvline(cap, color="tab:gray", ls=":", label=f"the bench gives up {cap:.0f} s after "
               "a fault (grey, hatched: not drained by then)")
    ax.axvline(15, color="tab:red", ls="--", label="target for a consumer SIGKILL: 15 s")
    ax.invert_yaxis()
    ax.set_xlim(0, max(rec.values()) * 1.9)
    ax.set_xlabel("seconds")
    ax.legend(loc="upper right", fontsize=8)
    fig.subplots_adjust(left=0.18)
    fig.savefig(out)
    plt.close(fig)


def ledger_plot(doc: dict[str, Any], out: Path) -> None:
    runs = doc["figures"]["runs"]
    procs = sorted(runs, key=int)
    fig, ax = figure(doc, f"Ledger throughput against processes in the group "
                          f"({doc['figures']['events']:,} preloaded events, 12 partitions)")
    xs = [int(p) for p in procs]
    ledger = [runs[p]["ledger"] for p in procs]
    ax.plot(xs, ledger, "o-", label="ledger group (batches)")
    ax.plot(xs, [runs["1"]["ledger"] * x for x in xs], ":", color="tab:gray",
            label="linear from 1 process (the baseline)")
    for p, v in zip(procs, ledger, strict=True):
        ax.annotate(f"{v:,.0f}/s", (int(p), v), textcoords="offset points", xytext=(0, 8),
                    ha="center")
    ax.set_xticks(xs)
    ax.set_ylim(bottom=0, top=max(ledger) * 1.6)
    ax.set_xlabel("ledger processes")
    ax.set_ylabel("events/s")
    ax.legend()
    fig.savefig(out)
    plt.close(fig)


PLOTS: list[tuple[str, str, Callable[[dict[str, Any], Path], None]]] = [
    ("ingest.json", "ingest-latency-cdf.png", ingest_plot),
    ("e2e.json", "e2e-latency-cdf.png", e2e_plot),
    ("e2e.json", "recovery-per-fault.png", recovery_plot),
    ("ledger-scale.json", "ledger-throughput-processes.png", ledger_plot),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=ROOT / "docs" / "benchmarks" / "data")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    skipped = 0
    for source, name, draw in PLOTS:
        path = args.data / source
        if not path.exists():
            print(f"skipped {name}: no {path} (run its benchmark with --results)")
            skipped += 1
            continue
        try:
            draw(json.loads(path.read_text()), args.out / name)
        except LookupError as exc:
            print(f"skipped {name}: {exc}")
            skipped += 1
            continue
        print(f"wrote {args.out / name}")
    return 1 if skipped == len(PLOTS) else 0


if __name__ == "__main__":
    raise SystemExit(main())
