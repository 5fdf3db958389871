"""Where each paystream process serves /metrics: one table that `paystream run` starts
its processes on and the stack's Prometheus scrapes (stack/prometheus.py), so the two
cannot disagree. Every port is a variable, so a second stack (the tests') scrapes its
own processes, never a developer's `make run`."""

from __future__ import annotations

from dataclasses import dataclass

from paystream.env import env_int, env_str


@dataclass(frozen=True)
class Target:
    job: str  # the Prometheus job label, and `paystream run`'s process name
    port: int
    host: str = "127.0.0.1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def metrics_targets() -> tuple[Target, ...]:
    """The ingest's admin listener, the consumer groups (ledger, DLQ mirror, notifier),
    the health exporter, the finality watcher, the merchant API's admin listener and the
    chain scanner."""
    return (
        Target("ingest", env_int("PAYSTREAM_INGEST_ADMIN_PORT", 8001),
               env_str("PAYSTREAM_INGEST_ADMIN_HOST", "127.0.0.1")),
        Target("ledger", env_int("PAYSTREAM_LEDGER_METRICS_PORT", 9401)),
        Target("dlq-mirror", env_int("PAYSTREAM_DLQ_MIRROR_METRICS_PORT", 9402)),
        Target("health", env_int("PAYSTREAM_HEALTH_METRICS_PORT", 9403)),
        Target("finality", env_int("PAYSTREAM_FINALITY_METRICS_PORT", 9404)),
        Target("api", env_int("PAYSTREAM_API_ADMIN_PORT", 8101),
               env_str("PAYSTREAM_API_ADMIN_HOST", "127.0.0.1")),
        Target("notifier", env_int("PAYSTREAM_NOTIFIER_METRICS_PORT", 9405)),
        Target("scanner", env_int("PAYSTREAM_SCANNER_METRICS_PORT", 9406)),
    )


def port_of(job: str) -> int:
    return next(t.port for t in metrics_targets() if t.job == job)
