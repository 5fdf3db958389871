"""The stack manager's process handling: failures name the component and show its log."""

from __future__ import annotations

import subprocess
import sys

import pytest

from paystream.stack.kafka import render
from paystream.stack.process import (
    StackError,
    pid_alive,
    read_pid,
    start_detached,
    started_with,
    stop_pid,
    wait_until,
)


def test_wait_until_fails_fast_with_log_tail_when_the_process_dies(tmp_path):
    pid_file, log = tmp_path / "x.pid", tmp_path / "x.log"
    start_detached([sys.executable, "-c", "print('boom: port in use'); raise SystemExit(3)"],
                   pid_file=pid_file, out_file=log)
    with pytest.raises(StackError) as info:
        wait_until("kafka", "accepting requests", lambda: False, timeout=30, log=log,
                   pid_file=pid_file, interval=0.1)
    message = str(info.value)
    assert message.startswith("[kafka] process exited while waiting for accepting requests")
    assert "boom: port in use" in message


def test_wait_until_times_out_naming_what_it_waited_for(tmp_path):
    with pytest.raises(StackError, match=r"\[connect\] not serving its REST API after 0 s"):
        wait_until("connect", "serving its REST API", lambda: False, timeout=0.3,
                   interval=0.1)


def test_stop_pid_stops_a_detached_process_and_removes_its_pid_file(tmp_path):
    pid_file = tmp_path / "sleep.pid"
    start_detached([sys.executable, "-c", "import time; time.sleep(60)"],
                   pid_file=pid_file, out_file=tmp_path / "sleep.log")
    assert read_pid(pid_file) is not None
    assert stop_pid(pid_file, timeout=10) is True
    assert not pid_file.exists()
    assert stop_pid(pid_file, timeout=1) is False  # idempotent


def test_render_fills_placeholders_and_refuses_missing_ones(tmp_path):
    template = tmp_path / "t.properties"
    template.write_text("listeners=PLAINTEXT://127.0.0.1:${port}\n")
    out = render(template, tmp_path / "out.properties", port=9999)
    assert out.read_text() == "listeners=PLAINTEXT://127.0.0.1:9999\n"
    with pytest.raises(KeyError):
        render(template, tmp_path / "out2.properties")


def test_a_process_whose_main_thread_exited_is_alive_until_its_last_thread_is(tmp_path):
    # The main thread leaves with pthread_exit (as a killed JVM's main thread is reaped
    # first): the kernel shows it as a zombie while the other thread still runs.
    code = ("import ctypes, threading, time\n"
            "threading.Thread(target=time.sleep, args=(30,)).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_until("test", "main thread gone", lambda: _state(proc.pid) == "Z",
                   timeout=10, interval=0.05)
        assert pid_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert not pid_alive(proc.pid)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(") ", 1)[1][0]


def test_started_with_compares_the_running_command_line():
    """`stack up` restarts a Prometheus or Alertmanager started with other flags."""
    cmd = [sys.executable, "-c", "import time; time.sleep(30)", "--flag=a b"]
    proc = subprocess.Popen(cmd)
    try:
        # Right after exec the kernel may show an empty command line for a moment.
        wait_until("test", "its command line", lambda: started_with(proc.pid, cmd),
                   timeout=10, interval=0.01)
        assert not started_with(proc.pid, [*cmd[:-1], "--flag=a"])
    finally:
        proc.kill()
        proc.wait()
    assert not started_with(proc.pid, cmd)  # gone
