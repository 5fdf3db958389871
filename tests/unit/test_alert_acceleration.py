"""The time-compressed copy of the alert rules the alert tests load
(tests/support/prometheus.py): only durations change, and promtool accepts it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from paystream.stack.prometheus import SHIPPED_RULES
from tests.support.prometheus import FACTOR, accelerate

RANGE = re.compile(r"\[[0-9]+m?s\]|\[[0-9]+[mh]\]")


def _rules(doc: dict) -> list[dict]:
    return [r for g in doc["groups"] for r in g["rules"]]


def test_only_durations_change() -> None:
    shipped = yaml.safe_load(SHIPPED_RULES.read_text())
    fast = accelerate(shipped, interval_s=1)
    assert [g["interval"] for g in fast["groups"]] == ["1000ms"] * len(shipped["groups"])
    pairs = list(zip(_rules(shipped), _rules(fast), strict=True))
    assert pairs
    for old, new in pairs:
        assert new["alert"] == old["alert"]
        assert RANGE.sub("[R]", new["expr"]) == RANGE.sub("[R]", old["expr"])
        assert new["labels"] == {**old["labels"], "paystream_rules": "accelerated"}
        assert new["annotations"] == old["annotations"]
        assert ("for" in new) == ("for" in old)
    flood = next(new for old, new in pairs if new["alert"] == "PaystreamDeadLetterFlood")
    assert flood["for"] == f"{60_000 // FACTOR}ms"
    assert f"[{300_000 // FACTOR}ms]" in flood["expr"] and "> 20" in flood["expr"]


def test_promtool_accepts_the_accelerated_rules(tmp_path: Path) -> None:
    assert shutil.which("promtool"), "promtool is missing: `paystream stack up` installs it"
    path = tmp_path / "accelerated.yml"
    path.write_text(yaml.safe_dump(accelerate(yaml.safe_load(SHIPPED_RULES.read_text()), 1)))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
