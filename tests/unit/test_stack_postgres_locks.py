"""Stale Postgres lock files left by a crashed, unreaped postmaster are cleared; live
ones are kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from paystream.stack import postgres
from paystream.stack.settings import StackSettings


def _settings(tmp_path: Path, port: int) -> StackSettings:
    return StackSettings.from_env().replaced(state_dir=tmp_path, pg_port=port)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_locks_of_a_dead_postmaster_are_removed(tmp_path):
    s = _settings(tmp_path, 59871)
    s.pg_data.mkdir(parents=True)
    dead = _dead_pid()
    (s.pg_data / "postmaster.pid").write_text(f"{dead}\n{s.pg_data}\n")
    socket_lock = Path(f"/tmp/.s.PGSQL.{s.pg_port}.lock")
    socket_lock.write_text(f"{dead}\n")
    try:
        assert postgres.is_running(s) is False
        assert not (s.pg_data / "postmaster.pid").exists()
        assert not socket_lock.exists()
    finally:
        socket_lock.unlink(missing_ok=True)


def test_locks_of_a_live_process_are_kept(tmp_path):
    s = _settings(tmp_path, 59872)
    s.pg_data.mkdir(parents=True)
    socket_lock = Path(f"/tmp/.s.PGSQL.{s.pg_port}.lock")
    socket_lock.write_text(f"{os.getpid()}\n")
    try:
        postgres._clear_stale_locks(s)
        assert socket_lock.exists()
    finally:
        socket_lock.unlink(missing_ok=True)
