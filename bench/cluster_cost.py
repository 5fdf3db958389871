"""What a replicated Kafka cluster costs against one broker, on the same machine, in the
same run: latency, CPU and memory (docs/operations.md#a-replicated-cluster, the default
of `make run`).

The baseline is the stack of the current environment (`make run`'s, one broker); the
cluster is the stack the `--cluster VAR=VALUE ...` settings name (three nodes). Both
must be up. The two are measured in turns, `--rounds` times (A B A B), each turn with
the existing benchmarks run as they are:
  - bench/cdc_latency.py: outbox commit -> record on the topic (Debezium's producer
    waits for acks=all, and a consumer sees a record once the followers have it);
  - bench/e2e_latency.py with `paystream run`'s defaults: webhook 2xx -> applied, one
    at a time and at a steady rate, lost counted;
then each stack idle (no traffic): the CPU its Kafka JVMs and Connect use, and their
resident memory. Prints every figure, the medians of the rounds side by side, and the
load average at the start and the end (a shared machine's figures are noisy).

    make bench-cluster      # both stacks up, then this; the cluster stack stopped after
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from cpu_usage import process_seconds  # bench/, on sys.path as the script's folder

from paystream.stack import connect, kafka
from paystream.stack.process import read_pid
from paystream.stack.settings import StackSettings

HERE = Path(__file__).resolve().parent
FIGURES = {
    "cdc median": re.compile(r"outbox commit -> topic: median ([\d.]+) ms"),
    "cdc p95": re.compile(r"outbox commit -> topic: .* p95 ([\d.]+) ms"),
    "e2e one-at-a-time p50": re.compile(r"e2e one-at-a-time: p50 (\d+) ms"),
    "e2e one-at-a-time p99": re.compile(r"e2e one-at-a-time: .*p99 (\d+) ms"),
    "e2e rate p50": re.compile(r"e2e \d+/s: p50 (\d+) ms"),
    "e2e rate p99": re.compile(r"e2e \d+/s: .*p99 (\d+) ms"),
    "e2e rate lost": re.compile(r"e2e \d+/s: .*lost (\d+)"),
}


@contextlib.contextmanager
def environment(extra: dict[str, str]) -> Iterator[None]:
    """os.environ with `extra` for the block: StackSettings reads the environment."""
    saved = dict(os.environ)
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_bench(script: str, args: list[str], extra: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True,
                          text=True, timeout=900, env={**os.environ, **extra})
    if done.returncode != 0:
        raise SystemExit(f"{script} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def jvm_pids(extra: dict[str, str]) -> dict[str, int]:
    with environment(extra):
        s = StackSettings.from_env()
        pids = {kafka.node_name(s, n): read_pid(kafka.pid_file(s, n)) for n in s.kafka_nodes}
        pids["connect"] = read_pid(connect.pid_file(s))
    missing = [name for name, pid in pids.items() if pid is None]
    if missing:
        raise SystemExit(f"not running: {', '.join(missing)} (bring the stack up first)")
    return {name: pid for name, pid in pids.items() if pid is not None}


def rss_mib(pid: int) -> int:
    m = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(m.group(1)) // 1024 if m else 0


def idle(extra: dict[str, str], seconds: float) -> tuple[float, float, int, int]:
    """(Kafka CPU % of a core, Connect CPU %, Kafka RSS MiB, Connect RSS MiB), idle."""
    pids = jvm_pids(extra)
    brokers = [pid for name, pid in pids.items() if name != "connect"]
    before_k, before_c = process_seconds(brokers), process_seconds([pids["connect"]])
    time.sleep(seconds)
    cpu_k = (process_seconds(brokers) - before_k) / seconds * 100
    cpu_c = (process_seconds([pids["connect"]]) - before_c) / seconds * 100
    return cpu_k, cpu_c, sum(map(rss_mib, brokers)), rss_mib(pids["connect"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", nargs="+", required=True, metavar="VAR=VALUE",
                        help="the cluster stack's settings (its state dir, ports, brokers)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cdc-events", type=int, default=100)
    parser.add_argument("--one-at-a-time", type=int, default=30)
    parser.add_argument("--rate", type=float, default=500)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--idle-seconds", type=float, default=30)
    args = parser.parse_args()
    cluster = dict(item.split("=", 1) for item in args.cluster)
    stacks = {"1 node": {}, f"{cluster.get('PAYSTREAM_KAFKA_BROKERS', '3')} nodes": cluster}
    print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    for extra in stacks.values():
        jvm_pids(extra)  # both up before anything is measured

    figures: dict[str, dict[str, list[float]]] = {name: {} for name in stacks}
    for n in range(1, args.rounds + 1):
        for name, extra in stacks.items():
            out = run_bench("cdc_latency.py", ["--events", str(args.cdc_events)], extra)
            out += run_bench("e2e_latency.py", [
                "--one-at-a-time", str(args.one_at_a_time), "--rates", str(args.rate),
                "--seconds", str(args.seconds), "--skip-faults"], extra)
            seen = {k: float(m.group(1)) for k, rx in FIGURES.items() if (m := rx.search(out))}
            for key, value in seen.items():
                figures[name].setdefault(key, []).append(value)
            print(f"round {n}, {name}: " + ", ".join(f"{k} {v:g}" for k, v in seen.items())
                  + f" (load {os.getloadavg()[0]:.2f})", flush=True)

    print(f"\nmedians of {args.rounds} rounds (ms; e2e at {args.rate:.0f}/s for "
          f"{args.seconds:.0f} s):")
    names = list(stacks)
    print(f"  {'figure':<24}" + "".join(f"{name:>12}" for name in names))
    for key in FIGURES:
        row = [statistics.median(figures[name].get(key, [float("nan")])) for name in names]
        print(f"  {key:<24}" + "".join(f"{value:>12.1f}" for value in row))

    print(f"\nidle, {args.idle_seconds:.0f} s each (CPU in % of one core):")
    for name, extra in stacks.items():
        cpu_k, cpu_c, rss_k, rss_c = idle(extra, args.idle_seconds)
        print(f"  {name}: Kafka {cpu_k:.1f} % CPU, {rss_k} MiB RSS; "
              f"Connect {cpu_c:.1f} % CPU, {rss_c} MiB RSS", flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
