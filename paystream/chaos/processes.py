"""The paystream processes a chaos run owns (ingest, ledger consumers, DLQ mirror), and
SIGKILL + restart of the stack's own processes (broker, Connect, Postgres).

A fault is only counted once it is seen to have happened: the process gone and its
port closed after the kill, then a new process (another pid) serving the port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from paystream.launch import paystream_argv
from paystream.stack import connect, kafka, postgres
from paystream.stack.process import pid_alive, read_pid, wait_until
from paystream.stack.settings import StackSettings


@dataclass
class Managed:
    """A paystream child process: started, SIGKILLed and restarted by the harness."""
    name: str
    args: list[str]
    env: dict[str, str]
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)

    def start(self, **extra_env: str) -> None:
        self.starts += 1
        log = (self.log_dir / f"{self.name}.log").open("ab")
        self.proc = subprocess.Popen(
            paystream_argv(*self.args),
            env={**self.env, **extra_env}, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        log.close()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_http_ok(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} not ready after {timeout:.0f} s")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def bounce(name: str, port: int, pid_of: Callable[[], int | None], kill: Callable[[], object],
           start: Callable[[], object], pause: float = 0.0, timeout: float = 60) -> str:
    """Kill a serving process and start it again, verifying each step took effect;
    raise if one did not (a fault that did not happen must not count as survived)."""
    before = pid_of()
    if before is None or not port_open(port):
        raise RuntimeError(f"{name} was not serving port {port} before the fault")
    kill()
    wait_until(name, f"port {port} closed after the kill", lambda: not port_open(port),
               timeout=timeout, interval=0.05)
    if pid_alive(before):
        raise RuntimeError(f"{name} pid {before} survived the kill")
    time.sleep(pause)
    start()
    wait_until(name, f"port {port} open after the restart", lambda: port_open(port),
               timeout=timeout, interval=0.1)
    after = pid_of()
    if after is None or after == before:
        raise RuntimeError(f"{name} serves port {port} but its pid is {after} "
                           f"(was {before})")
    return f"{name} pid {before} -> {after}, port {port} closed and reopened"


def sigkill(pid: int | None) -> None:
    if pid is None:
        raise RuntimeError("process to kill is not running")
    os.kill(pid, signal.SIGKILL)
    # pid_alive counts a zombie as dead: its parent may be gone and nobody reaps it.
    while pid_alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def kill_connect(s: StackSettings) -> None:
    sigkill(read_pid(connect.pid_file(s)))


def restart_connect(s: StackSettings) -> None:
    connect.start(s)
    connect.wait_running(s, timeout=180)


def kill_broker(s: StackSettings) -> None:
    sigkill(read_pid(kafka.pid_file(s)))


def restart_broker(s: StackSettings) -> None:
    kafka.start(s)
    _must_be_healthy("kafka", lambda: kafka.healthy(s))


def kill_postgres(s: StackSettings) -> None:
    """SIGKILL the postmaster and its children, as a crashed host would leave them."""
    pm = postgres.pid(s)
    if pm is None:
        raise RuntimeError("postgres is not running")
    kill_postmaster(pm)


def kill_postmaster(pm: int) -> None:
    """SIGKILL a postmaster and its children; returns once they are gone (or 10 s)."""
    children = [int(p) for p in os.listdir("/proc")
                if p.isdigit() and parent_pid(int(p)) == pm]
    for pid in [pm, *children]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(pid_alive(p) for p in [pm, *children]):
        time.sleep(0.05)


def restart_postgres(s: StackSettings) -> None:
    postgres.start(s)
    _must_be_healthy("postgres", lambda: postgres.healthy(s))


def _must_be_healthy(component: str, check: Callable[[], bool]) -> None:
    """A restart that left the component down would make the rest of the run
    meaningless: fail the fault (and so the run) instead."""
    wait_until(component, "healthy after the restart", check, timeout=60)


def parent_pid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
        return None
