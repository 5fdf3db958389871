"""Operator health checks: is anything stuck between the webhook and the ledger?

Each check reads one place where a payment can wait, from outside the processes that
move it (so a dead consumer or a stopped Connect worker is still seen):

| check            | where                                   | what stuck looks like            |
|------------------|-----------------------------------------|----------------------------------|
| database         | SELECT 1                                | unreachable                      |
| stuck_events     | event_status `received`                 | older than the threshold         |
| oldest_unapplied | the same rows                           | the oldest one's age             |
| replication_slot | pg_replication_slots `paystream_outbox` | missing, inactive, WAL piling up |
| consumer_lag     | committed offsets vs high watermarks    | lag, or lag with no member       |
| dead_letters     | dead_letter_queue.first_seen_at         | many in the last hour            |
| consumer_stops   | consumer_stops (consumers/stops.py)     | a group stopped by its DLQ limit |
| chain_deposits   | chain_deposits open / settling rows     | waiting far past finality, or a  |
|                  |                                         | settlement the ledger never took |
| chain_scan       | chain_scan_cursors vs the node's        | the scanner's cursor far behind  |
|                  | finalized (or credit-depth) block       | (chain_scan_lag_blocks)          |
| connector        | Kafka Connect REST status               | not RUNNING                      |

`paystream health` prints them as a table and exits 1 if one is unhealthy;
`paystream health --serve-metrics PORT` publishes the same values as Prometheus gauges,
computed at scrape time (HealthCollector), for the rules in ops/prometheus/alerts.yml.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum

import httpx
import psycopg2
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from paystream import kafka_security, operator_cli
from paystream.connectors.status import read_status
from paystream.consumers import stops
from paystream.finality.breaker import CircuitOpenError
from paystream.finality.rpc import RpcError
from paystream.finality.scanner import service as scan_service
from paystream.finality.scanner import settings as scan_settings
from paystream.finality.scanner.service import ChainScanner
from paystream.ops.health_settings import MIB, HealthSettings
from paystream.schema.db import (
    Connection,
    Cursor,
    connect,
    one_row,
)

# -- the gauges the exporter publishes: name -> (help, label names). Declared once. ----
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    # 1 when Postgres answered SELECT 1 within the connect timeout.
    "paystream_database_up": ("Postgres reachable", ()),
    # Events still `received` for longer than the stuck threshold: CDC or the consumer
    # is not moving them.
    "paystream_stuck_events": ("Payment events received but not applied in time", ()),
    # The threshold the stuck count uses, so a dashboard can show what "stuck" meant.
    "paystream_stuck_event_threshold_seconds": ("Age after which an event is stuck", ()),
    # Age of the oldest event still `received` (0 when none): grows while anything waits.
    "paystream_oldest_unapplied_event_age_seconds": (
        "Age of the oldest payment event not yet applied", ()),
    # WAL the slot keeps on disk (current LSN - restart_lsn); grows while Debezium
    # does not confirm, and fills the disk if nobody acts.
    "paystream_replication_slot_retained_wal_bytes": (
        "WAL retained by the logical replication slot", ("slot",)),
    # 1 while a walsender (Debezium) is attached to the slot.
    "paystream_replication_slot_active": ("Replication slot in use", ("slot",)),
    # Σ over partitions of high watermark - committed offset (earliest offset when the
    # group never committed), as the broker sees it: works while the consumer is dead.
    "paystream_consumer_group_lag": (
        "Messages not yet committed by the consumer group", ("group", "topic")),
    # Members of the group right now (0: nobody is consuming).
    "paystream_consumer_group_members": ("Consumer group members", ("group",)),
    # 1 per consumer group stopped by its DLQ limit (a consumer_stops row): it consumes
    # nothing until `paystream consume resume GROUP`. No sample while none is stopped.
    "paystream_consumer_group_stopped": (
        "Consumer group stopped by its DLQ limit, until resumed", ("group", "reason")),
    # Dead letters first seen within the last hour (dead_letter_queue.first_seen_at).
    "paystream_dead_letters_last_hour": ("Dead letters in the last hour", ()),
    # Chain deposits waiting for finality (pending or suspect), and the oldest one's age:
    # mainnet finalises in ~13 min, so hours mean the watcher or its node is not working.
    "paystream_chain_deposits_waiting": ("Chain deposits waiting for finality", ()),
    "paystream_oldest_waiting_chain_deposit_age_seconds": (
        "Age of the oldest chain deposit waiting for finality", ()),
    # Settlements the watcher emitted that the ledger has not applied within the stuck
    # threshold: CDC or the ledger is not moving them (or one was dead-lettered).
    "paystream_stuck_chain_settlements": (
        "Chain settlements emitted but not applied in time", ()),
    # Webhook deliveries of enabled endpoints due and not sent (no sender running, or all
    # saturated), the oldest one's wait, and the endpoints disabled (nobody told).
    "paystream_notify_overdue_deliveries": ("Webhook deliveries due and not sent", ()),
    "paystream_notify_oldest_overdue_delivery_age_seconds": (
        "How long the oldest due webhook delivery has waited", ()),
    "paystream_notify_disabled_endpoints": ("Webhook endpoints disabled", ()),
    # Blocks between the block the chain scanner scans up to (the node's finalized, or
    # head - credit depth) and its cursor, per network it has a cursor for: deposits in
    # those blocks that no webhook brought are not recorded yet.
    "paystream_chain_scan_lag_blocks": ("Blocks the chain scanner is behind", ("network",)),
    # 1 when the connector and all its tasks are RUNNING.
    "paystream_statement_unresolved_differences": (
        "Settlement statement differences without a done decision", ()),
    "paystream_statement_oldest_unresolved_age_seconds": (
        "Age of the oldest unresolved statement difference (0: none)", ()),
    "paystream_connector_running": ("Debezium connector running", ("connector",)),
    # Each check's verdict: 0 ok, 1 warn, 2 unhealthy.
    "paystream_health_check_verdict": ("Health check verdict (0 ok, 1 warn, 2 unhealthy)",
                                       ("check",)),
}

CHECK_NAMES = ("database", "stuck_events", "oldest_unapplied", "replication_slot",
               "consumer_lag", "consumer_stops", "dead_letters", "chain_deposits",
               "chain_scan", "notifications", "statements", "connector")
# A statement difference unresolved longer than this is a warning (finance closes the
# month on them: docs/statements.md); the alert waits as long.
STATEMENT_DIFFERENCE_WARN_S = 86400.0
# chain_deposits states: waiting for the finalized block (not credited); decided by the
# watcher, its event waiting for the ledger (schema/migrations 0004, 0005).
WAITING_STATES = ("pending", "suspect")
SETTLING_STATES = ("crediting", "finalizing", "reorging", "reversing")


class Health(IntEnum):
    """How healthy a check found its part of the pipeline, in order: the worst wins."""

    OK = 0
    WARN = 1
    UNHEALTHY = 2

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class Sample:
    metric: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CheckResult:
    name: str  # one of CHECK_NAMES
    component: str
    check: str
    value: str
    threshold: str
    verdict: Health
    samples: tuple[Sample, ...] = ()


def _grade(value: float, warn: float, unhealthy: float) -> Health:
    if value >= unhealthy:
        return Health.UNHEALTHY
    return Health.WARN if value >= warn else Health.OK


def _bytes(n: float) -> str:
    return f"{n / MIB:.1f} MiB"


class HealthChecker:
    """Runs the checks; holds one Kafka admin client across runs (cheap scrapes)."""

    def __init__(self, settings: HealthSettings) -> None:
        self.settings = settings
        self._admin: AdminClient | None = None
        self._scanners: dict[str, ChainScanner] = {}  # the lag check's node clients

    def run(self, only: Sequence[str] | None = None) -> list[CheckResult]:
        wanted = set(only or CHECK_NAMES)
        results: list[CheckResult] = []
        db_checks = wanted & {"database", "stuck_events", "oldest_unapplied",
                              "replication_slot", "consumer_stops", "dead_letters",
                              "chain_deposits", "chain_scan", "notifications",
                              "statements"}
        if db_checks:
            results += self._database_checks(db_checks)
        if "consumer_lag" in wanted:
            results += self._lag_checks()
        if "connector" in wanted:
            results.append(self._connector_check())
        order = {name: i for i, name in enumerate(CHECK_NAMES)}
        return sorted(results, key=lambda r: order[r.name])

    # -- Postgres --------------------------------------------------------------------

    @contextlib.contextmanager
    def _db(self) -> Iterator[Connection]:
        conn = connect(self.settings.dsn, connect_timeout=max(1, int(self.settings.timeout_s)),
                       application_name="paystream-health")
        try:
            # One read-only transaction for the checks, its timeout SET LOCAL: a session
            # SET would stay behind on a transaction-pooling PgBouncer's server connection.
            # Autocommit, so psycopg2 opens no transaction of its own before this BEGIN.
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("BEGIN READ ONLY; SET LOCAL statement_timeout = %s",
                            (int(self.settings.timeout_s * 1000),))
            yield conn
            with conn.cursor() as cur:
                cur.execute("COMMIT")
        finally:
            conn.close()

    def _database_checks(self, wanted: set[str]) -> list[CheckResult]:
        s = self.settings
        started = time.monotonic()
        try:
            with self._db() as conn, conn.cursor() as cur:
                cur.execute("SELECT 1")
                elapsed_ms = (time.monotonic() - started) * 1000
                out = [CheckResult("database", "postgres", "reachable", f"{elapsed_ms:.0f} ms",
                                   f"answers within {s.timeout_s:g} s", Health.OK,
                                   (Sample("paystream_database_up", 1),))]
                if wanted & {"stuck_events", "oldest_unapplied"}:
                    out += self._event_checks(cur)
                if "replication_slot" in wanted:
                    out.append(self._slot_check(cur))
                if "consumer_stops" in wanted:
                    out += self._stop_checks(cur)
                if "dead_letters" in wanted:
                    out.append(self._dead_letter_check(cur))
                if "chain_deposits" in wanted:
                    out += self._chain_deposit_checks(cur)
                if "chain_scan" in wanted:
                    out += self._scan_lag_checks(cur)
                if "notifications" in wanted:
                    out.append(self._notification_check(cur))
                if "statements" in wanted:
                    out.append(self._statement_check(cur))
        except psycopg2.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            out = [CheckResult("database", "postgres", "reachable", f"error: {reason[:80]}",
                               f"answers within {s.timeout_s:g} s", Health.UNHEALTHY,
                               (Sample("paystream_database_up", 0),))]
            out += [CheckResult(name, "postgres", name, "unknown (database unreachable)", "-",
                                Health.UNHEALTHY) for name in sorted(wanted - {"database"})]
        return [r for r in out if r.name in wanted]

    def _event_checks(self, cur: Cursor) -> list[CheckResult]:
        s = self.settings
        # status_changed_at, not received_at: a DLQ replay makes an old event `received`
        # again, and its wait starts then. Read from event_status alone: its partial
        # index (event_status_received_idx) holds only the received rows' times.
        cur.execute(
            "SELECT count(*) FILTER (WHERE status_changed_at"
            "                        < now() - make_interval(secs => %s)),"
            "       coalesce(extract(epoch FROM now() - min(status_changed_at)), 0)"
            " FROM event_status WHERE status = 'received'", (s.stuck_after_s,))
        stuck, oldest = one_row(cur)
        stuck, oldest = int(stuck), max(0.0, float(oldest))
        return [
            CheckResult("stuck_events", "pipeline", f"events received > {s.stuck_after_s:g} s ago",
                        str(stuck), "0 (more: CDC or consumer stuck)",
                        Health.UNHEALTHY if stuck else Health.OK,
                        (Sample("paystream_stuck_events", stuck),
                         Sample("paystream_stuck_event_threshold_seconds", s.stuck_after_s))),
            CheckResult("oldest_unapplied", "pipeline", "oldest unapplied event age",
                        f"{oldest:.1f} s", f"warn > {s.stuck_after_s:g} s",
                        Health.WARN if oldest > s.stuck_after_s else Health.OK,
                        (Sample("paystream_oldest_unapplied_event_age_seconds", oldest),)),
        ]

    def _slot_check(self, cur: Cursor) -> CheckResult:
        s = self.settings
        threshold = f"warn {_bytes(s.wal_warn_bytes)}, unhealthy {_bytes(s.wal_unhealthy_bytes)}"
        cur.execute(
            "SELECT active, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), wal_status"
            " FROM pg_replication_slots WHERE slot_name = %s", (s.slot_name,))
        row = cur.fetchone()
        check = f"slot {s.slot_name} retained WAL"
        if row is None:
            # Without the slot, events written now are never sent: nothing else is worse.
            return CheckResult("replication_slot", "postgres", check, "slot missing", threshold,
                               Health.UNHEALTHY)
        active, retained, wal_status = row
        labels = (("slot", s.slot_name),)
        if retained is None:  # restart_lsn NULL: the slot was invalidated (WAL removed)
            return CheckResult("replication_slot", "postgres", check,
                               f"invalidated ({wal_status})", threshold, Health.UNHEALTHY,
                               (Sample("paystream_replication_slot_active", int(active), labels),))
        retained = float(retained)
        verdict = _grade(retained, s.wal_warn_bytes, s.wal_unhealthy_bytes)
        if not active:
            # Normal for a moment while Connect restarts; stuck_events says when it matters.
            verdict = max(verdict, Health.WARN)
        return CheckResult(
            "replication_slot", "postgres", check,
            f"{_bytes(retained)} ({'active' if active else 'INACTIVE'})", threshold, verdict,
            (Sample("paystream_replication_slot_retained_wal_bytes", retained, labels),
             Sample("paystream_replication_slot_active", int(active), labels)))

    def _stop_checks(self, cur: Cursor) -> list[CheckResult]:
        """One unhealthy line per group its DLQ limit stopped: the reason, and the
        command that resumes it."""
        found = stops.all_stops(cur)
        if not found:
            return [CheckResult("consumer_stops", "consumers", "groups stopped by their DLQ "
                                "limit", "none", "none", Health.OK)]
        return [CheckResult(
            "consumer_stops", "consumers", f"group {stop.group_id} STOPPED",
            f"{stop.reason} since {stop.stopped_at:%Y-%m-%d %H:%M:%S %Z}: "
            f"{stop.detail[:160]}", f"resume: {stop.resume_command}", Health.UNHEALTHY,
            (Sample("paystream_consumer_group_stopped", 1,
                    (("group", stop.group_id), ("reason", stop.reason))),))
            for stop in found]

    def _dead_letter_check(self, cur: Cursor) -> CheckResult:
        s = self.settings
        cur.execute("SELECT count(*) FROM dead_letter_queue"
                    " WHERE first_seen_at > now() - interval '1 hour'")
        count = int(one_row(cur)[0])
        return CheckResult(
            "dead_letters", "dlq", "dead letters in the last hour", str(count),
            f"warn >= {s.dead_letters_warn:g}, unhealthy >= {s.dead_letters_unhealthy:g}",
            _grade(count, s.dead_letters_warn, s.dead_letters_unhealthy),
            (Sample("paystream_dead_letters_last_hour", count),))

    def _chain_deposit_checks(self, cur: Cursor) -> list[CheckResult]:
        s = self.settings
        cur.execute(
            "SELECT count(*) FILTER (WHERE state = ANY(%s)),"
            "       coalesce(extract(epoch FROM now() - min(recorded_at)"
            "                FILTER (WHERE state = ANY(%s))), 0),"
            "       count(*) FILTER (WHERE state = ANY(%s)"
            "                        AND decided_at < now() - make_interval(secs => %s))"
            " FROM chain_deposits WHERE state = ANY(%s)",
            (list(WAITING_STATES), list(WAITING_STATES), list(SETTLING_STATES),
             s.stuck_after_s, [*WAITING_STATES, *SETTLING_STATES]))
        waiting, oldest, stuck = one_row(cur)
        waiting, oldest, stuck = int(waiting), max(0.0, float(oldest)), int(stuck)
        wait_verdict = _grade(oldest, s.deposit_wait_warn_s, s.deposit_wait_unhealthy_s)
        return [
            CheckResult("chain_deposits", "finality", "oldest deposit waiting for finality",
                        f"{oldest:.1f} s ({waiting} waiting)",
                        f"warn > {s.deposit_wait_warn_s:g} s, "
                        f"unhealthy > {s.deposit_wait_unhealthy_s:g} s", wait_verdict,
                        (Sample("paystream_chain_deposits_waiting", waiting),
                         Sample("paystream_oldest_waiting_chain_deposit_age_seconds",
                                oldest))),
            CheckResult("chain_deposits", "ledger",
                        f"settlements unapplied > {s.stuck_after_s:g} s", str(stuck),
                        "0 (more: CDC or ledger stuck, or a dead letter)",
                        Health.UNHEALTHY if stuck else Health.OK,
                        (Sample("paystream_stuck_chain_settlements", stuck),)),
        ]

    def _scan_lag_checks(self, cur: Cursor) -> list[CheckResult]:
        """Per network the finality settings name and the scanner has a cursor for: the
        block it scans up to (asked of the node, through the watcher's client) minus
        its cursor. A node that does not answer is a warning: the finality breaker's
        alert says more."""
        s = self.settings
        threshold = f"warn {s.scan_lag_warn:g}, unhealthy {s.scan_lag_unhealthy:g} blocks"
        cur.execute("SELECT network, block_number FROM chain_scan_cursors")
        cursors = {network: int(block) for network, block in cur.fetchall()}
        try:
            networks = scan_settings.from_env()
        except ValueError as exc:  # SettingsError: the check cannot tell, the rest can
            return [CheckResult("chain_scan", "scanner", "chain scanner lag",
                                f"settings: {str(exc)[:80]}", threshold, Health.WARN)]
        out = []
        for network in networks:
            if network.network not in cursors:
                continue
            check = f"chain scanner lag on {network.network}"
            if network.network not in self._scanners:  # one client per network: its breaker
                self._scanners[network.network] = scan_service.scanner_for(network)
            try:
                target = self._scanners[network.network].target()
            except (RpcError, CircuitOpenError) as exc:
                out.append(CheckResult("chain_scan", "scanner", check,
                                       f"node unreachable: {str(exc)[:80]}", threshold,
                                       Health.WARN))
                continue
            lag = max(0, target - cursors[network.network])
            out.append(CheckResult(
                "chain_scan", "scanner", check, f"{lag} blocks (cursor "
                f"{cursors[network.network]}, target {target})", threshold,
                _grade(lag, s.scan_lag_warn, s.scan_lag_unhealthy),
                (Sample("paystream_chain_scan_lag_blocks", lag,
                        (("network", network.network),)),)))
        return out or [CheckResult("chain_scan", "scanner", "chain scanner lag",
                                   "no scanner cursor on the configured networks", threshold,
                                   Health.OK)]

    def _notification_check(self, cur: Cursor) -> CheckResult:
        """Webhook deliveries due and not sent (no sender running, or all saturated),
        of enabled endpoints; a disabled endpoint is a warning (nobody told)."""
        s = self.settings
        cur.execute(
            "SELECT coalesce(extract(epoch FROM now() - min(d.next_attempt_at)), 0),"
            "       count(*)"
            " FROM notification_deliveries d JOIN notification_endpoints e USING (endpoint_id)"
            " WHERE d.state = 'pending' AND d.next_attempt_at < now()"
            " AND (d.claimed_until IS NULL OR d.claimed_until < now())"
            " AND e.disabled_at IS NULL")
        overdue_s, overdue = one_row(cur)
        overdue_s, overdue = max(0.0, float(overdue_s)), int(overdue)
        cur.execute("SELECT count(*) FROM notification_endpoints WHERE disabled_at IS NOT NULL")
        disabled = int(one_row(cur)[0])
        verdict = Health.UNHEALTHY if overdue_s > s.stuck_after_s else (
            Health.WARN if disabled else Health.OK)
        return CheckResult(
            "notifications", "notifier", "oldest webhook delivery due, not sent",
            f"{overdue_s:.1f} s ({overdue} due; {disabled} endpoints disabled)",
            f"unhealthy > {s.stuck_after_s:g} s; warn: a disabled endpoint", verdict,
            (Sample("paystream_notify_overdue_deliveries", overdue),
             Sample("paystream_notify_oldest_overdue_delivery_age_seconds", overdue_s),
             Sample("paystream_notify_disabled_endpoints", disabled)))

    def _statement_check(self, cur: Cursor) -> CheckResult:
        """Statement differences unresolved (migration 0036's rule, the one
        statements/reads.py lists by) and the oldest one's age."""
        cur.execute(
            "SELECT count(*), coalesce(extract(epoch FROM now() - min(k.matched_at)), 0)"
            " FROM statement_matches k WHERE statement_unresolved("
            " k.result, (SELECT d.state FROM statement_decisions d"
            "  WHERE d.match_id = k.match_id ORDER BY d.decision_id DESC LIMIT 1))")
        count, age_s = one_row(cur)
        count, age_s = int(count), max(0.0, float(age_s))
        return CheckResult(
            "statements", "finance", "oldest unresolved statement difference",
            f"{age_s / 3600:.1f} h ({count} unresolved)",
            f"warn > {STATEMENT_DIFFERENCE_WARN_S / 3600:g} h",
            Health.WARN if age_s > STATEMENT_DIFFERENCE_WARN_S else Health.OK,
            (Sample("paystream_statement_unresolved_differences", count),
             Sample("paystream_statement_oldest_unresolved_age_seconds", age_s)))

    # -- Kafka -----------------------------------------------------------------------

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            ms = int(self.settings.timeout_s * 1000)
            # log_level 2: a broker that is down is reported by the check, not by librdkafka.
            self._admin = AdminClient({"bootstrap.servers": self.settings.bootstrap,
                                       "socket.timeout.ms": ms, "log_level": 2,
                                       **kafka_security.client_config(
                                           kafka_security.HEALTH)})
        return self._admin

    def _lag_checks(self) -> list[CheckResult]:
        s = self.settings
        threshold = f"warn {s.lag_warn:g}, unhealthy {s.lag_unhealthy:g}"
        out = []
        broker_down: str | None = None
        for group, topic in s.groups:
            name = f"group {group} lag on {topic}"
            try:
                if broker_down:  # one timeout is enough: do not wait again per group
                    raise LookupError(broker_down)
                lag, members = group_lag(self._admin_client(), group, topic, s.timeout_s)
            except (KafkaException, LookupError, TimeoutError) as exc:
                reason = _kafka_reason(exc)
                if isinstance(exc, KafkaException | TimeoutError):
                    broker_down = reason
                out.append(CheckResult("consumer_lag", "kafka", name, f"error: {reason[:90]}",
                                       threshold, Health.UNHEALTHY))
                continue
            verdict = _grade(lag, s.lag_warn, s.lag_unhealthy)
            if members == 0:
                # Messages waiting and nobody to read them: stalled whatever the size.
                verdict = max(verdict, Health.UNHEALTHY if lag else Health.WARN)
            out.append(CheckResult(
                "consumer_lag", "kafka", name,
                f"{lag} ({members} member{'s' if members != 1 else ''})", threshold, verdict,
                (Sample("paystream_consumer_group_lag", lag,
                        (("group", group), ("topic", topic))),
                 Sample("paystream_consumer_group_members", members, (("group", group),)))))
        return out

    # -- Kafka Connect -----------------------------------------------------------------

    def _connector_check(self) -> CheckResult:
        s = self.settings
        labels = (("connector", s.connector_name),)
        check = f"connector {s.connector_name}"
        try:
            status = read_status(s, timeout=s.timeout_s)
        except httpx.HTTPError as exc:
            return CheckResult("connector", "connect", check,
                               f"REST unreachable ({type(exc).__name__})", "RUNNING",
                               Health.UNHEALTHY, (Sample("paystream_connector_running", 0,
                                                          labels),))
        state = status.summary
        verdict = Health.OK if status.running else (
            Health.WARN if "RESTARTING" in state else Health.UNHEALTHY)
        return CheckResult("connector", "connect", check, state, "RUNNING", verdict,
                           (Sample("paystream_connector_running", int(status.running),
                                   labels),))


def _kafka_reason(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    if isinstance(exc, KafkaException) and isinstance(err, KafkaError):
        return f"kafka: {err.str()}"
    return str(exc) or type(exc).__name__


def group_lag(admin: AdminClient, group: str, topic: str, timeout_s: float) -> tuple[int, int]:
    """(Σ lag over the topic's partitions, current members) for `group` on `topic`.

    A partition the group never committed counts from its earliest offset: the
    consumers start there (auto.offset.reset=earliest).
    """
    md = admin.list_topics(topic, timeout=timeout_s)
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None:
        raise LookupError(f"topic {topic} missing ({meta.error if meta else 'no metadata'})")
    tps = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
    request = [ConsumerGroupTopicPartitions(group, tps)]
    committed_f = admin.list_consumer_group_offsets(request, request_timeout=timeout_s)[group]
    # confluent-kafka leaves OffsetSpec's constructors unannotated.
    latest, earliest = OffsetSpec.latest(), OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    high_f = admin.list_offsets({tp: latest for tp in tps}, request_timeout=timeout_s)
    low_f = admin.list_offsets({tp: earliest for tp in tps}, request_timeout=timeout_s)
    desc_f = admin.describe_consumer_groups([group], request_timeout=timeout_s)[group]
    committed = {tp.partition: tp.offset for tp in committed_f.result(timeout_s).topic_partitions}
    high = {tp.partition: f.result(timeout_s).offset for tp, f in high_f.items()}
    low = {tp.partition: f.result(timeout_s).offset for tp, f in low_f.items()}
    lag = 0
    for p, end in high.items():
        start = committed.get(p, -1)
        if start < 0:  # no committed offset (OFFSET_INVALID)
            start = low[p]
        lag += max(0, end - start)
    return lag, len(desc_f.result(timeout_s).members)


def worst(results: Sequence[CheckResult]) -> Health:
    return max((r.verdict for r in results), default=Health.OK)


def format_table(results: Sequence[CheckResult]) -> str:
    table = operator_cli.format_table(
        ("component", "check", "value", "threshold", "verdict"),
        [(r.component, r.check, r.value, r.threshold, str(r.verdict)) for r in results])
    return f"{table}\noverall: {worst(results)}"


class HealthCollector(Collector):
    """Prometheus collector: runs the checks at every scrape and yields the gauges."""

    def __init__(self, checker: HealthChecker, only: Sequence[str] | None = None) -> None:
        self.checker = checker
        self.only = only

    def describe(self) -> list[GaugeMetricFamily]:
        # Without describe() the registry would run the checks once at registration.
        return [GaugeMetricFamily(name, help_text, labels=list(labels))
                for name, (help_text, labels) in METRICS.items()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        results = self.checker.run(self.only)
        families = {name: GaugeMetricFamily(name, help_text, labels=list(labels))
                    for name, (help_text, labels) in METRICS.items()}
        verdicts: dict[str, Health] = {}
        for r in results:
            verdicts[r.name] = max(verdicts.get(r.name, Health.OK), r.verdict)
            for smp in r.samples:
                families[smp.metric].add_metric([v for _, v in smp.labels], smp.value)
        for name, verdict in verdicts.items():
            families["paystream_health_check_verdict"].add_metric([name], int(verdict))
        yield from families.values()
