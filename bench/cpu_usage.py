"""CPU seconds per component, from /proc (Linux; run on the database host).

Python: the given processes' own user+system time (read while they are alive).
Postgres: every process of the `postgres` OS user, plus what the postmaster has reaped
from exited backends (cutime+cstime): a backend that lived only during the run is
counted too. Both are read before and after; the difference is the run's.
"""

from __future__ import annotations

import os
import pwd
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


def postgres_seconds(pgdata: Path) -> float:
    """CPU seconds of the whole Postgres server so far (live processes + reaped ones)."""
    uid = pwd.getpwnam("postgres").pw_uid
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        fields = _stat(int(entry.name))
        if fields is None:
            continue
        total += int(fields[11]) + int(fields[12])
        if int(entry.name) == postmaster:
            total += int(fields[13]) + int(fields[14])  # cutime, cstime: reaped backends
    return total / TICKS
