"""`paystream stack status` on the running stack."""

from __future__ import annotations

import subprocess

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


def test_status_shows_prometheus_when_the_stack_runs_it():
    """`make test` starts the test stack with PAYSTREAM_PROMETHEUS=1: its row is there,
    healthy, with the port it was asked for."""
    from paystream.stack.prometheus import PrometheusConfig

    cfg = PrometheusConfig.from_env()
    assert cfg.enabled, "run the tests on a stack with PAYSTREAM_PROMETHEUS=1 (make test does)"
    done = subprocess.run(paystream_argv("stack", "status"), capture_output=True, text=True,
                          timeout=60)
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert "prometheus" in rows, done.stdout
    assert rows["prometheus"][1] == str(cfg.port)
    assert rows["prometheus"][4] == "healthy", done.stdout
