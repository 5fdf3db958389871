"""The Grafana dashboard (ops/grafana/paystream.json), read as the tests need it: every
panel's PromQL, with Grafana's own variables replaced by what Grafana would send."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "ops" / "grafana" / "paystream.json"
# Grafana's $__rate_interval is max(4 x scrape interval, the step + 1 scrape): a window
# that holds several samples. The tests' queries use this one.
RATE_INTERVAL = "30s"
METRIC = re.compile(r"\b(paystream_[a-z0-9_]+)\b")


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str  # as Prometheus gets it

    def __str__(self) -> str:
        return f"{self.panel!r} {self.ref}: {self.expr}"


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(dashboard: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The panels that query something (not the rows)."""
    return [p for p in (dashboard or load())["panels"] if p["type"] != "row"]


def queries(dashboard: dict[str, Any] | None = None) -> list[Query]:
    return [Query(p["title"], t["refId"], t["expr"].replace("$__rate_interval", RATE_INTERVAL))
            for p in panels(dashboard) for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    """The paystream series an expression reads, without the _bucket/_sum/_count and
    _total suffixes the client library adds to a histogram's and a counter's name."""
    names = set()
    for name in METRIC.findall(expr):
        for suffix in ("_bucket", "_sum", "_count", "_total"):
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        names.add(name)
    return names
