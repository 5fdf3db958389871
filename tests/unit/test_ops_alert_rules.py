"""The Prometheus alert rules are valid and behave as their unit tests say.

promtool comes from Debian's `prometheus` package (the stack manager installs it).
A missing promtool fails: an unchecked alert file is how pages silently stop.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "ops" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "ops" / "prometheus" / "alerts_test.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, ("promtool not found: install Debian's `prometheus` package "
                   "(apt-get install -y prometheus; the stack manager does)")
    return found


def test_rules_pass_promtool_check() -> None:
    done = subprocess.run([promtool(), "check", "rules", str(RULES)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_rules_pass_their_unit_tests() -> None:
    done = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], cwd=RULE_TESTS.parent,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_unit_test() -> None:
    alerts = set(re.findall(r"^\s*- alert: (\w+)", RULES.read_text(), re.M))
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert alerts and alerts <= tested, f"untested alerts: {sorted(alerts - tested)}"


def test_rules_use_only_declared_metric_names() -> None:
    """Every paystream_* metric a rule reads is declared in the code that exports it."""
    sources = "\n".join(p.read_text() for p in [
        ROOT / "consumers" / "metrics.py", ROOT / "consumers" / "ledger" / "reconcile.py",
        ROOT / "ops" / "health.py", ROOT / "ingest" / "metrics.py",
        ROOT / "finality" / "metrics.py", ROOT / "finality" / "chain_reconcile.py",
        ROOT / "consumers" / "ledger" / "metrics.py", ROOT / "notify" / "metrics.py",
        ROOT / "ops" / "backup_metrics.py", ROOT / "stack" / "failover_follower.py"])
    rules = "\n".join(line for line in RULES.read_text().splitlines()
                      if not line.lstrip().startswith("#"))
    used = set(re.findall(r"\b(paystream_\w+)", rules))
    missing = sorted(name for name in used
                     if f'"{name}"' not in sources
                     and f'"{name.removesuffix("_total")}"' not in sources)
    assert not missing, f"metrics used by alerts but declared nowhere: {missing}"
