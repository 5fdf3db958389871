"""Starting, watching and stopping the stack's long-running processes.

Processes are detached (own session) so they outlive `paystream stack up`; each has a
pid file under the state dir's run/ folder and a log under logs/.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class StackError(RuntimeError):
    """A component failed; the message names it and carries the tail of its log."""

    def __init__(self, component: str, message: str, log: Path | None = None) -> None:
        tail = ""
        if log is not None:
            tail = f"\n--- last lines of {log} ---\n{tail_file(log, 40)}"
        super().__init__(f"[{component}] {message}{tail}")
        self.component = component


def tail_file(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(data.splitlines()[-lines:])


def read_pid(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return pid if pid_alive(pid) else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours is dead for our purposes, once its last thread is gone: a
    # killed JVM's main thread turns zombie while its other threads still exit, holding
    # its files (a listening port) until the last one does.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().split(") ", 1)[1][0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    # ProcessLookupError: reaped between the open and the read (ESRCH; seen in the
    # failover test while it waited for a SIGKILLed postmaster).
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def started_with(pid: int, cmd: list[str]) -> bool:
    """Whether the running `pid` was started with exactly `cmd` (its /proc cmdline): a
    process started by an older paystream with other flags is not."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return False
    return [a.decode(errors="replace") for a in argv] == cmd


def start_detached(cmd: list[str], *, pid_file: Path, out_file: Path,
                   env: dict[str, str] | None = None, cwd: Path | None = None,
                   inherit_env: bool = True) -> int:
    """Start `cmd` in its own session, stdout+stderr appended to out_file; return its pid.
    Its environment is ours updated with `env`, or, with inherit_env=False, `env` alone."""
    out_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    with out_file.open("ab") as out:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})} if inherit_env else dict(env or {}),
            cwd=cwd, start_new_session=True,
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def stop_pid(pid_file: Path, *, timeout: float) -> bool:
    """SIGTERM, wait up to `timeout` seconds, then SIGKILL. True if a process was stopped."""
    return stop_pids([pid_file], timeout=timeout)


def stop_pids(pid_files: list[Path], *, timeout: float) -> bool:
    """stop_pid for several processes at once: SIGTERM to all, then one deadline for all.
    True if any was stopped."""
    pids = [pid for pid in map(read_pid, pid_files) if pid is not None]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it ended since read_pid
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        for pid in pids:
            _reap(pid)
        time.sleep(0.2)
    for pid in pids:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                _reap(pid)
                time.sleep(0.1)
    for pid_file in pid_files:
        pid_file.unlink(missing_ok=True)
    return bool(pids)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def wait_until(component: str, what: str, check: Callable[[], bool], *, timeout: float,
               log: Path | None = None, pid_file: Path | None = None,
               interval: float = 0.5) -> None:
    """Poll `check` until it is true; fail early if the process died, or at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except StackError:
            raise
        except Exception:  # any other error means "not ready yet"
            pass
        if pid_file is not None and read_pid(pid_file) is None:
            raise StackError(component, f"process exited while waiting for {what}", log)
        if time.monotonic() > deadline:
            raise StackError(component, f"not {what} after {timeout:.0f} s", log)
        time.sleep(interval)


def run(cmd: list[str], component: str, *, env: dict[str, str] | None = None,
        timeout: float = 600, log: Path | None = None, stdin: str | None = None) -> str:
    """Run a command to completion; raise StackError with its output when it fails.
    `stdin`: text fed to it (how a secret reaches a command: never on its argv)."""
    try:
        # errors="replace": a tool's log may carry bytes that are not UTF-8
        # (pg_autoctl 2.0's `set node` logs an uninitialised parameter's bytes).
        done = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                              timeout=timeout, env={**os.environ, **(env or {})}, input=stdin,
                              stdin=subprocess.DEVNULL if stdin is None else None)
    except subprocess.TimeoutExpired as exc:
        raise StackError(component, f"timed out after {timeout:.0f} s: {' '.join(cmd)}",
                         log) from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-3000:]
        raise StackError(component, f"command failed ({done.returncode}): {' '.join(cmd)}\n"
                         f"{output}", log)
    return done.stdout
