"""The connector watchdog against the real Connect. The state it heals (a Debezium task
FAILED because Postgres went away in the middle of the task's start) was found by the
chaos suite and could not be reproduced on demand: restarting the task while Postgres
is down makes Debezium retry instead, and Connect refuses to create a connector whose
database is unreachable. So this checks the watchdog's reading of a real status and the
exact restart call it sends; which parts count as failed is unit-tested."""

from __future__ import annotations

import subprocess
import time

import httpx

from paystream.connectors import task_restarter
from paystream.connectors.endpoint import rest_auth, rest_client
from paystream.launch import paystream_argv
from paystream.stack import connect
from paystream.stack.settings import StackSettings


def test_a_running_connector_is_left_alone():
    s = StackSettings.from_env()
    connect.wait_running(s, timeout=120)
    with rest_client(timeout=10) as client:
        assert task_restarter.check_once(s, client) == task_restarter.Check(
            "RUNNING", (), False)


def test_connect_accepts_the_restart_the_watchdog_sends():
    """The exact call the watchdog makes for a FAILED task (KIP-745), sent to the real
    Connect: accepted, and with nothing failed it restarts nothing."""
    s = StackSettings.from_env()
    resp = httpx.post(f"{s.connect_url}/connectors/{s.connector_name}/restart",
                      auth=rest_auth(),
                      params=task_restarter.RESTART_PARAMS, timeout=30)
    assert resp.status_code in (202, 204), resp.text
    connect.wait_running(s, timeout=120)


def test_the_watchdog_command_runs_until_sigterm():
    proc = subprocess.Popen(paystream_argv("stack", "watchdog", "--interval", "0.5"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(3)
    assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
    proc.terminate()
    assert proc.wait(timeout=15) == 0
    out = proc.stdout.read() if proc.stdout else ""
    assert '"event": "task_restarter_started"' in out or "task_restarter_started" in out
