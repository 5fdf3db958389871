"""The chaos suite's short form on the real stack: faults of every kind under load, then
lost = 0 and double-applied = 0 (issue 5's must-show)."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import paystream_cmd


def test_short_chaos_run_loses_nothing_and_applies_nothing_twice():
    done = subprocess.run(paystream_cmd("chaos", "--short"), capture_output=True, text=True,
                          timeout=900)
    out = done.stdout + done.stderr
    print(out)  # the report, in the test log
    assert done.returncode == 0, out[-5000:]
    assert "\nlost = 0\n" in out
    assert "\ndouble-applied = 0\n" in out
    faults = dict(re.findall(r"([a-z-]+)=(\d+)", re.search(r"faults injected: (.*)",
                                                          out).group(1)))
    faults = {k: int(v) for k, v in faults.items()}
    assert faults["consumer-sigkill"] + faults["consumer-crash-after-db-commit"] >= 3
    assert faults["consumer-crash-after-db-commit"] >= 1
    for kind in ("connect-restart", "broker-restart", "postgres-restart", "ingest-restart"):
        assert faults[kind] >= 1, kind
    assert re.search(r"redelivery=\d+", out) and re.search(r"poison=\d+", out)
