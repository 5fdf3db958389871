"""`paystream health`'s thresholds and where it looks: its variables, each overridden by
a flag. A module of its own so the command line reads the defaults without the checks'
Kafka and Postgres clients."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field

from paystream.connectors import endpoint
from paystream.env import EnvSettings
from paystream.kafka_nodes import kafka_bootstrap
from paystream.schema.db import database_url
from paystream.schema.events import PAYMENTS_DLQ_TOPIC, PAYMENTS_TOPIC

MIB = 1024 * 1024
DEFAULT_GROUPS: tuple[tuple[str, str], ...] = (
    ("ledger", PAYMENTS_TOPIC), ("dlq-mirror", PAYMENTS_DLQ_TOPIC))


class HealthSettings(EnvSettings):
    """Read by `paystream health` ([operations](operations.md#health)); a flag overrides
    its variable."""

    doc_section = "Health"

    stuck_after_s: float = Field(60.0, alias="PAYSTREAM_HEALTH_STUCK_AFTER_S", gt=0,
                                 description="an event still `received` after this is "
                                             "stuck (`--stuck-after`)")
    wal_warn_mb: float = Field(512.0, alias="PAYSTREAM_HEALTH_WAL_WARN_MB", ge=0,
                               description="WAL retained by the slot: warn (`--wal-warn-mb`)")
    wal_unhealthy_mb: float = Field(2048.0, alias="PAYSTREAM_HEALTH_WAL_UNHEALTHY_MB", ge=0,
                                    description="WAL retained by the slot: unhealthy "
                                                "(`--wal-unhealthy-mb`)")
    lag_warn: float = Field(1_000.0, alias="PAYSTREAM_HEALTH_LAG_WARN", ge=0,
                            description="consumer lag: warn (`--lag-warn`)")
    lag_unhealthy: float = Field(100_000.0, alias="PAYSTREAM_HEALTH_LAG_UNHEALTHY", ge=0,
                                 description="consumer lag: unhealthy (`--lag-unhealthy`)")
    dead_letters_warn: float = Field(1.0, alias="PAYSTREAM_HEALTH_DLQ_WARN", ge=0,
                                     description="dead letters first seen in the last hour: "
                                                 "warn (`--dlq-warn`)")
    dead_letters_unhealthy: float = Field(50.0, alias="PAYSTREAM_HEALTH_DLQ_UNHEALTHY", ge=0,
                                          description="the same: unhealthy "
                                                      "(`--dlq-unhealthy`)")
    deposit_wait_warn_s: float = Field(
        1800.0, alias="PAYSTREAM_HEALTH_DEPOSIT_WAIT_WARN_S", gt=0,
        description="a chain deposit waiting for finality longer: warn")
    deposit_wait_unhealthy_s: float = Field(
        7200.0, alias="PAYSTREAM_HEALTH_DEPOSIT_WAIT_UNHEALTHY_S", gt=0,
        description="the same: unhealthy")
    scan_lag_warn: float = Field(
        100.0, alias="PAYSTREAM_HEALTH_SCAN_LAG_WARN", ge=0,
        description="blocks the chain scanner's cursor is behind the block it scans up to "
                    "(`chain_scan_lag_blocks`): warn")
    scan_lag_unhealthy: float = Field(
        1000.0, alias="PAYSTREAM_HEALTH_SCAN_LAG_UNHEALTHY", ge=0,
        description="the same: unhealthy")
    # Flags only (`paystream health --group/--timeout`) and where to look.
    slot_name: str = "paystream_outbox"
    groups: tuple[tuple[str, str], ...] = DEFAULT_GROUPS
    timeout_s: float = 5.0
    dsn: str = Field(default_factory=lambda: database_url("ops"))
    bootstrap: str = Field(default_factory=kafka_bootstrap)
    connect_url: str = Field(default_factory=endpoint.connect_url)
    connector_name: str = Field(default_factory=endpoint.connector_name)

    @property
    def wal_warn_bytes(self) -> float:
        return self.wal_warn_mb * MIB

    @property
    def wal_unhealthy_bytes(self) -> float:
        return self.wal_unhealthy_mb * MIB

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 overrides: Mapping[str, object] | None = None, **flags: Any) -> Self:
        """The settings from the environment, a flag given (not None) winning."""
        given = {k: v for k, v in flags.items() if v is not None}
        return super().from_env(env, {**(overrides or {}), **given})
