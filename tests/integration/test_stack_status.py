"""`paystream stack status` on the running stack."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from paystream.launch import paystream_argv


def test_status_lists_every_component_healthy():
    done = subprocess.run(paystream_argv("stack", "status"), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    for component in ("postgres", "kafka", "connect"):
        assert "healthy" in rows[component], rows[component]
    assert "RUNNING" in rows["connector"]
    assert "4.3.0" in rows["kafka"]


def test_status_shows_prometheus_and_alertmanager_when_the_stack_runs_them():
    """`make test` starts the test stack with PAYSTREAM_PROMETHEUS=1: their rows are
    there, healthy, with the ports they were asked for; Alertmanager on loopback only."""
    from paystream.stack.alertmanager import AlertmanagerConfig
    from paystream.stack.prometheus import PrometheusConfig

    cfg = PrometheusConfig.from_env()
    assert cfg.enabled, "run the tests on a stack with PAYSTREAM_PROMETHEUS=1 (make test does)"
    done = subprocess.run(paystream_argv("stack", "status"), capture_output=True, text=True,
                          timeout=60)
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert "prometheus" in rows, done.stdout
    assert rows["prometheus"][1] == str(cfg.port)
    assert rows["prometheus"][4] == "healthy", done.stdout
    am = AlertmanagerConfig.from_env()
    assert rows["alertmanager"][1] == str(am.port), done.stdout
    assert rows["alertmanager"][4] == "healthy", done.stdout
    # Its only listener: the API on 127.0.0.1 (no gossip port on every interface).
    assert _listening(int(rows["alertmanager"][2])) == {("0100007F", am.port)}


def _listening(pid: int) -> set[tuple[str, int]]:
    """(address as /proc/net/tcp writes it, port) of every socket `pid` listens on."""
    sockets = {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()
               if os.readlink(fd).startswith("socket:")}
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and f"socket:[{fields[9]}]" in sockets:
                address, port = fields[1].rsplit(":", 1)
                found.add((address, int(port, 16)))
    return found
