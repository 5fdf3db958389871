"""A chaos fault counts only once it is seen to have happened: bounce() against a real
process serving a real port."""

from __future__ import annotations

import subprocess
import sys

import pytest

from paystream.chaos.processes import bounce, port_open
from paystream.launch import free_port
from paystream.stack.process import StackError, wait_until


class Server:
    """`python -m http.server` on a port of its own, restartable."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until("server", "listening", lambda: port_open(self.port), timeout=10,
                   interval=0.05)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None


@pytest.fixture
def server():
    s = Server()
    s.start()
    yield s
    s.kill()


def test_a_real_restart_is_reported_with_both_pids(server):
    first = server.pid()
    done = bounce("web", server.port, server.pid, server.kill, server.start)
    assert server.pid() not in (None, first)
    assert done == f"web pid {first} -> {server.pid()}, port {server.port} closed and reopened"


def test_a_kill_that_leaves_the_port_open_is_not_a_fault(server):
    with pytest.raises(StackError, match="closed after the kill"):
        bounce("web", server.port, server.pid, lambda: None, server.start, timeout=1)


def test_a_restart_that_does_not_start_a_new_process_is_not_a_fault(server):
    # The kill works, but "start" revives nothing: the port never reopens.
    with pytest.raises(StackError, match="open after the restart"):
        bounce("web", server.port, server.pid, server.kill, lambda: None, timeout=1)


def test_a_process_not_serving_before_the_fault_is_refused():
    idle = Server()
    with pytest.raises(RuntimeError, match="was not serving"):
        bounce("web", idle.port, idle.pid, idle.kill, idle.start)
