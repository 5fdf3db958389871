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
from dataclasses import dataclass
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
    snap = postgres_snapshot(pgdata)
    return snap.reaped + sum(seconds for _, seconds in snap.live.values())


@dataclass(frozen=True)
class PostgresSnapshot:
    """The server's CPU at one moment: what its exited children used (the postmaster
    reaps them all into one count) and each live process's role and seconds."""

    reaped: float
    live: dict[int, tuple[str, float]]


def postgres_snapshot(pgdata: Path) -> PostgresSnapshot:
    """Every process of the Postgres server of `pgdata`, the postmaster's own CPU under
    `background`."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    fields = _stat(postmaster)
    reaped = 0 if fields is None else int(fields[13]) + int(fields[14])  # cutime, cstime
    live = {postmaster: ("background", process_seconds([postmaster]))}
    for pid in _children(postmaster):
        live[pid] = (_role(pid), process_seconds([pid]))
    return PostgresSnapshot(reaped / TICKS, live)


def postgres_split(before: PostgresSnapshot, after: PostgresSnapshot) -> dict[str, float]:
    """The server's CPU between two snapshots by what the processes do (role_of):
    `backends` (client connections), `walsender` (logical decoding for Debezium),
    `background` (the postmaster, checkpointer, writers, autovacuum and the rest), and
    `exited`: processes that ended in between (an autovacuum worker, a short
    connection), whose role the reaped count no longer tells. Each live process counts
    its own growth under its role, so one that exits moves nothing from a role to
    another (the split's parts are never negative)."""
    split = {"backends": 0.0, "walsender": 0.0, "background": 0.0, "exited": 0.0}
    gone = 0.0  # what the processes that exited had used by `before`
    for pid, (role, seconds) in before.live.items():
        if after.live.get(pid, ("", 0.0))[0] != role:  # exited (or its pid reused)
            gone += seconds
    for pid, (role, seconds) in after.live.items():
        then = before.live.get(pid)
        split[role] += seconds - (then[1] if then is not None and then[0] == role else 0.0)
    split["exited"] = after.reaped - before.reaped - gone
    return split


def _role(pid: int) -> str:
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:  # exited: the postmaster's reaped count has it, as a backend's
        return "backends"
    return role_of(title)


def role_of(title: str) -> str:
    """The role of a Postgres process from the title it sets over its argv
    ("postgres: walsender ...", "postgres: checkpointer", "postgres: user db ...")."""
    words = title.removeprefix("postgres:").split()
    if words[:1] == ["walsender"]:
        return "walsender"
    if not words or words[0] in _BACKGROUND:
        return "background"
    return "backends"


_BACKGROUND = frozenset({"checkpointer", "background", "walwriter", "autovacuum",
                         "logical", "archiver", "stats", "startup"})


def fixed_us_per_event(shares: dict[str, float], rate: float) -> float:
    """What the JVMs' idle shares of a core (kafka, connect) add to the CPU per event at
    `rate`. Postgres's is left out: at rest it is autovacuum after the bench's own
    inserts, work that is not fixed."""
    idle = shares.get("kafka", 0.0) + shares.get("connect", 0.0)
    return idle / rate * 1e6 if rate > 0 else 0.0


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
