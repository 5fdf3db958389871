"""The stack's live Prometheus, from the tests: its API, and the shipped alert rules
compressed in time so an alert fires in seconds instead of minutes.

The compressed copy is the shipped file with every `for:` and every range selector
(`[5m]`) divided by FACTOR and nothing else changed: same expressions, same thresholds,
same alert names. Each rule carries the label `paystream_rules="accelerated"` and lives
in the stack's rules.d/ (stack/prometheus.py), beside the shipped rules, which stay
loaded as they are; a test looks only at the accelerated alerts and removes the file
when it is done. ops/prometheus/alerts.yml itself is never rewritten.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import httpx
import yaml

from paystream.stack import prometheus
from paystream.stack.settings import StackSettings

# 5m -> 15 s, 2m -> 6 s, 1m -> 3 s, 10m -> 30 s: each window still holds 15+ samples
# at the test stack's 1 s scrape interval.
FACTOR = 20
LABEL = "paystream_rules"
ACCELERATED = "accelerated"
RULES_FILE = "accelerated.yml"
_DURATION = re.compile(r"^(\d+)(ms|s|m|h)$")
_RANGE = re.compile(r"\[(\d+)(ms|s|m|h)\]")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def _seconds(number: str, unit: str) -> float:
    return int(number) * _SECONDS[unit]


def _scaled(seconds: float) -> str:
    return f"{max(round(seconds * 1000 / FACTOR), 1)}ms"


def accelerate(rules: dict[str, Any], interval_s: float) -> dict[str, Any]:
    """The rules with every duration divided by FACTOR, evaluated every `interval_s`."""
    groups = []
    for group in rules["groups"]:
        out = []
        for rule in group["rules"]:
            rule = dict(rule)
            rule["expr"] = _RANGE.sub(
                lambda m: f"[{_scaled(_seconds(m.group(1), m.group(2)))}]", rule["expr"])
            if "for" in rule:
                m = _DURATION.match(str(rule["for"]))
                assert m, f"unexpected for: {rule['for']!r} in {rule.get('alert')}"
                rule["for"] = _scaled(_seconds(m.group(1), m.group(2)))
            rule["labels"] = {**rule.get("labels", {}), LABEL: ACCELERATED}
            out.append(rule)
        groups.append({"name": f"{ACCELERATED}-{group['name']}",
                       "interval": f"{round(interval_s * 1000)}ms", "rules": out})
    return {"groups": groups}


@dataclass
class LivePrometheus:
    """The Prometheus of the stack the tests run on."""

    settings: StackSettings
    cfg: prometheus.PrometheusConfig

    @classmethod
    def of_this_stack(cls) -> LivePrometheus:
        s, cfg = StackSettings.from_env(), prometheus.PrometheusConfig.from_env()
        if not prometheus.healthy(s, cfg):
            raise AssertionError(
                f"no Prometheus of this stack at {cfg.url}: run `paystream stack up "
                "--prometheus` with the same variables (make test starts the test stack's)")
        return cls(s, cfg)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result; AssertionError with Prometheus's error."""
        resp = httpx.get(f"{self.cfg.url}/api/v1/query", params={"query": expr}, timeout=10)
        body = resp.json()
        assert body.get("status") == "success", f"{expr}: {body.get('error')}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def target_port(self, job: str) -> int:
        """The port Prometheus scrapes `job` on (what a test's process must listen on).
        A Prometheus that just started lists its targets a moment after it is ready."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for target in prometheus.api(self.cfg, "/api/v1/targets")["activeTargets"]:
                if target["labels"]["job"] == job:
                    return int(target["labels"]["instance"].rsplit(":", 1)[1])
            time.sleep(0.2)
        raise AssertionError(f"Prometheus scrapes no job {job}")

    def wait_scraped(self, job: str, timeout_s: float = 30) -> None:
        """Until the job's target is up (its process listens and answers)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(float(r["value"][1]) == 1 for r in self.query(f'up{{job="{job}"}}')):
                return
            time.sleep(0.2)
        raise AssertionError(f"Prometheus never scraped job {job} as up")

    def accelerate_rules(self) -> None:
        rules = yaml.safe_load(prometheus.SHIPPED_RULES.read_text())
        path = prometheus.rules_dir(self.settings) / RULES_FILE
        path.write_text(yaml.safe_dump(accelerate(rules, self.cfg.scrape_interval_s),
                                       sort_keys=False))
        prometheus.reload(self.settings, self.cfg)

    def restore_rules(self) -> None:
        (prometheus.rules_dir(self.settings) / RULES_FILE).unlink(missing_ok=True)
        prometheus.reload(self.settings, self.cfg)

    def alert_state(self, name: str, **labels: str) -> str:
        """firing, pending, or inactive: the accelerated alert `name` whose labels
        include `labels`, as Prometheus's own /api/v1/alerts reports it."""
        states = [a["state"] for a in prometheus.api(self.cfg, "/api/v1/alerts")["alerts"]
                  if a["labels"].get("alertname") == name
                  and a["labels"].get(LABEL) == ACCELERATED
                  and all(a["labels"].get(k) == v for k, v in labels.items())]
        for state in ("firing", "pending"):
            if state in states:
                return state
        return "inactive"

    def wait_alert(self, state: str, name: str, timeout_s: float, **labels: str) -> float:
        """Seconds until the alert is in `state`; AssertionError at the timeout."""
        started = time.monotonic()
        seen = "inactive"
        while time.monotonic() - started < timeout_s:
            seen = self.alert_state(name, **labels)
            if seen == state:
                return time.monotonic() - started
            time.sleep(0.2)
        raise AssertionError(f"{name} {labels} still {seen} after {timeout_s:.0f} s, "
                             f"waiting for {state}")
