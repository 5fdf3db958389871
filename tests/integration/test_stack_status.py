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
