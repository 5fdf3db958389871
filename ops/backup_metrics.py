"""The health exporter's backup metrics: WAL archiving (pg_stat_archiver) and the newest
backup's age (`pgbackrest info`), for the alerts PaystreamWalArchivingFailing and
PaystreamBackupTooOld (ops/prometheus/alerts.yml).

Registered beside HealthCollector by `paystream health --serve-metrics`. The archiver's
view is read at every scrape; the repository's at most once a minute (`pgbackrest info`
decrypts the repository's manifests: cheap, not free). A source that cannot be read
publishes nothing for it and logs why: the alerts on absent series cover it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime

import psycopg2
import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from paystream.backups import Backup, BackupInfoError, BackupSettings, backups
from paystream.schema.db import connect

# name -> help. Declared once; the counters' names end in _total as exposed.
METRICS: dict[str, str] = {
    # pg_stat_archiver.archived_count / failed_count: segments archive_command pushed,
    # and its failed attempts (a segment is retried until it succeeds).
    "paystream_wal_archived": "WAL segments archived (pg_stat_archiver.archived_count)",
    "paystream_wal_archive_failed": "Failed WAL archive attempts (pg_stat_archiver.failed_count)",
    # 0 when there was none since the statistics were reset.
    "paystream_wal_archive_last_archived_timestamp_seconds":
        "When the last WAL segment was archived",
    "paystream_wal_archive_last_failed_timestamp_seconds":
        "When the last WAL archive attempt failed",
    # Now minus the newest backup's stop time; +Inf when the repository holds none.
    "paystream_backup_newest_age_seconds": "Age of the newest backup in the repository",
    "paystream_backups": "Backups in the repository",
}
REPOSITORY_EVERY_S = 60.0


def _epoch(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0


class BackupCollector(Collector):
    """Prometheus collector of the archiver's state and the repository's backups."""

    def __init__(self, dsn: str, settings: BackupSettings | None = None) -> None:
        self.dsn = dsn
        self.settings = settings or BackupSettings.from_env()
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._backups: list[Backup] | None = None
        self._last_error = ""
        self.log = structlog.get_logger("ops.backup_metrics")

    def describe(self) -> list[Metric]:
        return []  # collected at scrape time only

    def collect(self) -> Iterator[Metric]:
        yield from self._archiver()
        found = self._repository()
        if found is not None:
            newest = found[-1].age_s() if found else float("inf")
            yield GaugeMetricFamily("paystream_backup_newest_age_seconds",
                                    METRICS["paystream_backup_newest_age_seconds"], newest)
            yield GaugeMetricFamily("paystream_backups", METRICS["paystream_backups"],
                                    len(found))

    def _archiver(self) -> Iterator[Metric]:
        try:
            conn = connect(self.dsn, connect_timeout=5, application_name="paystream-health")
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT archived_count, failed_count, last_archived_time,"
                                " last_failed_time FROM pg_stat_archiver")
                    row = cur.fetchone()
            finally:
                conn.close()
        except psycopg2.Error as exc:
            self.log.warning("archiver_unreadable", error=str(exc).strip()[:300])
            return
        if row is None:
            return
        archived, failed, last_archived, last_failed = row
        yield CounterMetricFamily("paystream_wal_archived", METRICS["paystream_wal_archived"],
                                  archived)
        yield CounterMetricFamily("paystream_wal_archive_failed",
                                  METRICS["paystream_wal_archive_failed"], failed)
        for name, value in (("paystream_wal_archive_last_archived_timestamp_seconds",
                             last_archived),
                            ("paystream_wal_archive_last_failed_timestamp_seconds",
                             last_failed)):
            yield GaugeMetricFamily(name, METRICS[name], _epoch(value))

    def _repository(self) -> list[Backup] | None:
        with self._lock:
            if time.monotonic() - self._read_at >= REPOSITORY_EVERY_S:
                self._read_at = time.monotonic()
                try:
                    self._backups = backups(self.settings)
                    self._last_error = ""
                except BackupInfoError as exc:
                    self._backups = None
                    if str(exc) != self._last_error:  # once per cause, not every minute
                        self._last_error = str(exc)
                        self.log.warning("backups_unreadable", error=str(exc)[:300])
            return self._backups
