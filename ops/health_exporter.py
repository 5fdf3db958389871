"""`paystream health --serve-metrics`: the health checks as Prometheus metrics, and the
full reconciliation on a schedule (its metrics share the default registry).

The checks run at each scrape (ops/health.py's HealthCollector), so a metric is never
older than the scrape; the reconciliation is too heavy for that and runs every
`reconcile_every_s` seconds instead (0: never). WAL archiving and the newest backup's
age come from a collector of their own (ops/backup_metrics.py).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence

import psycopg2
import structlog
from prometheus_client import REGISTRY, start_http_server

from paystream.consumers.ledger.reconcile import ERRORS, SCOPE_FULL, reconcile, record_full_check
from paystream.logs import configure_logging
from paystream.operator_cli import CannotRunError, database
from paystream.ops.backup_metrics import BackupCollector
from paystream.ops.health import HealthChecker, HealthCollector
from paystream.reconcile_checks import FEATURE_CHECKS


def serve(checker: HealthChecker, checks: Sequence[str] | None, bind: str, port: int,
          reconcile_every_s: float) -> None:
    """Serve /metrics on bind:port until SIGTERM or SIGINT."""
    configure_logging("health-exporter")
    REGISTRY.register(HealthCollector(checker, checks))
    REGISTRY.register(BackupCollector(checker.settings.dsn))
    start_http_server(port, addr=bind)
    print(f"paystream health: serving metrics on {bind}:{port}/metrics", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.is_set():
        if reconcile_every_s > 0:
            full_reconciliation()
        stop.wait(reconcile_every_s if reconcile_every_s > 0 else 3600)


def full_reconciliation() -> None:
    """One full reconciliation into its metrics; a failure is counted and logged, and the
    exporter keeps serving the checks."""
    try:
        with database("paystream-reconcile", autocommit=True) as conn:
            record_full_check(reconcile(conn, checks=FEATURE_CHECKS))
    except (psycopg2.Error, CannotRunError) as exc:
        ERRORS.labels(SCOPE_FULL).inc()
        structlog.get_logger("consumers.reconcile").error(
            "reconciliation_failed", scope=SCOPE_FULL, error=str(exc).strip()[:300])
