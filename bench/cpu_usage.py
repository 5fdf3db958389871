"""CPU seconds per component, from /proc (Linux; run on the database host).

Python: the given processes' own user+system time (read while they are alive), or a
process with its children (uvicorn's workers). Postgres: the stack's postmaster and its
children (every backend and auxiliary process is one), plus what the postmaster has
reaped from exited backends (cutime+cstime): a backend that lived only during the run
is counted too, another cluster on a shared machine is not. Kafka and Connect: the JVMs
whose pid files the stack keeps (every broker of a cluster). All are read before and
after; the difference is the run's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone
        return None
    # The command name is in parentheses and may hold spaces: split after it.
    return text[text.rindex(")") + 2:].split()


def process_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of `pids` (those still alive)."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def tree_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its live children (uvicorn's workers)."""
    return process_seconds([pid, *_children(pid)])


def postgres_seconds(pgdata: Path) -> float:
    """CPU seconds of the Postgres server of `pgdata` so far (live processes + reaped
    ones)."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    fields = _stat(postmaster)
    reaped = 0 if fields is None else int(fields[13]) + int(fields[14])  # cutime, cstime
    return tree_seconds(postmaster) + reaped / TICKS


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat(int(entry.name))
            if fields is not None and int(fields[1]) == pid:  # ppid
                found.append(int(entry.name))
    return found


def stack_seconds(run_dir: Path, component: str) -> float:
    """CPU seconds of the stack's `component` processes (kafka: every broker's pid file
    kafka*.pid; connect) that are alive."""
    pids = []
    for pid_file in run_dir.glob(f"{component}*.pid"):
        try:
            pids.append(int(pid_file.read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return process_seconds(pids)
