"""The Grafana dashboard is importable as is and reads only metrics the code exports.
(tests/integration/test_grafana_dashboard.py runs every query on the live Prometheus.)"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.dashboard import load, metric_names, panels, queries

ROOT = Path(__file__).resolve().parents[2]
EXPORTERS = ("ingest", "consumers", "finality", "ops", "api")


def exported_names() -> set[str]:
    """Every metric name the product declares: the first argument of a
    Counter/Gauge/Histogram, and the keys of the health exporter's METRICS table,
    without a counter's _total (the client adds it back)."""
    names = set()
    for folder in EXPORTERS:
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and node.value.startswith("paystream_") and node.value.isidentifier():
                    names.add(node.value.removesuffix("_total"))
    return names


def test_every_panel_reads_a_metric_the_code_exports() -> None:
    exported = exported_names()
    assert {"paystream_ingest_requests", "paystream_consumer_lag",
            "paystream_finality_breaker_state", "paystream_consumer_group_lag"} <= exported
    unknown = {q.panel: sorted(metric_names(q.expr) - exported) for q in queries()}
    assert not {p: n for p, n in unknown.items() if n}, unknown
    assert all(metric_names(q.expr) or "ALERTS" in q.expr for q in queries())


def test_it_imports_without_a_datasource_of_a_given_name() -> None:
    """Every panel and query uses the dashboard's `datasource` variable (type
    datasource, any Prometheus): importable as is, provisioned or by the UI."""
    dashboard = load()
    [var] = [v for v in dashboard["templating"]["list"] if v["name"] == "datasource"]
    assert (var["type"], var["query"]) == ("datasource", "prometheus")
    for panel in panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"] and dashboard["schemaVersion"] >= 36
    assert "__inputs" not in dashboard  # nothing to answer at import


def test_it_shows_what_the_issue_asks_for() -> None:
    read = set().union(*(metric_names(q.expr) for q in queries()))
    for metric in ("paystream_ingest_requests", "paystream_ingest_request_duration_seconds",
                   "paystream_consumer_lag", "paystream_consumer_group_lag",
                   "paystream_consumer_batch_size", "paystream_consumer_db_transaction_seconds",
                   "paystream_consumer_dead_letters", "paystream_finality_pending_deposits",
                   "paystream_finality_breaker_state", "paystream_reconciliation_mismatches"):
        assert metric in read, metric
