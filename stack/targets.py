"""Where each paystream process serves /metrics: one table that `paystream run` starts
its processes on and the stack's Prometheus scrapes (stack/prometheus.py), so the two
cannot disagree. Every port is a variable, so a second stack (the tests') scrapes its
own processes, never a developer's `make run`."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from paystream.api.settings import ApiSettings
from paystream.env import EnvSettings, read_one
from paystream.ingest.settings import IngestSettings
from paystream.schema.db import DatabaseSettings


class MetricsPortSettings(EnvSettings):
    """Where `paystream run` starts each process's `/metrics` and the stack's Prometheus
    scrapes it."""

    doc_section = "Prometheus and the metrics ports"

    ledger: int = Field(9401, alias="PAYSTREAM_LEDGER_METRICS_PORT", ge=1,
                        description="the ledger consumer's `/metrics` under `paystream run`")
    dlq_mirror: int = Field(9402, alias="PAYSTREAM_DLQ_MIRROR_METRICS_PORT", ge=1,
                            description="the DLQ mirror's")
    health: int = Field(9403, alias="PAYSTREAM_HEALTH_METRICS_PORT", ge=1,
                        description="the health exporter's")
    finality: int = Field(9404, alias="PAYSTREAM_FINALITY_METRICS_PORT", ge=1,
                          description="the finality watcher's")
    notifier: int = Field(9405, alias="PAYSTREAM_NOTIFIER_METRICS_PORT", ge=1,
                          description="the notifier's (its consumer and its sender)")
    scanner: int = Field(9406, alias="PAYSTREAM_SCANNER_METRICS_PORT", ge=1,
                         description="the chain scanner's")
    chain_reconcile: int = Field(9407, alias="PAYSTREAM_CHAIN_RECONCILE_METRICS_PORT", ge=1,
                                 description="the scheduled `reconcile --chain --loop`'s")
    failover: int = Field(9408, alias="PAYSTREAM_FAILOVER_METRICS_PORT", ge=1,
                          description="the failover follower's (`paystream db "
                                      "follow-failover`, with a standby)")


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
    the health exporter, the finality watcher, the merchant API's admin listener, the
    chain scanner and the scheduled chain reconciliation."""
    ports = MetricsPortSettings.from_env()
    return (
        Target("ingest", read_one(IngestSettings, "admin_port"),
               read_one(IngestSettings, "admin_host")),
        Target("ledger", ports.ledger),
        Target("dlq-mirror", ports.dlq_mirror),
        Target("health", ports.health),
        Target("finality", ports.finality),
        Target("api", read_one(ApiSettings, "admin_port"), read_one(ApiSettings, "admin_host")),
        Target("notifier", ports.notifier),
        Target("scanner", ports.scanner),
        Target("chain-reconcile", ports.chain_reconcile),
        # Only a stack with a standby runs the failover follower.
        *((Target("failover", ports.failover),)
          if read_one(DatabaseSettings, "standby") else ()),
    )


def port_of(job: str) -> int:
    return next(t.port for t in metrics_targets() if t.job == job)
