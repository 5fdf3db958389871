"""The failover follower: `paystream db follow-failover`, started by `stack up --standby`
and stopped by `stack down`. CDC across a failover
(docs/operations.md#cdc-across-a-failover), and the standby's metrics.

Every second it asks the pg_auto_failover monitor which node is writable. When that is
not the node Debezium reads (cdc_node_file), a failover happened; in this order:
1. the slot on the new primary (an inactive one left there is dropped first: its
   position is older than anything we need), so every commit from now on is decoded;
2. every event still `received` and every settlement not applied published again
   (schema/republish.py), and the recent notification intents the notifier has not
   recorded (notify/republish.py), after the slot, so whatever the old slot had not
   confirmed reaches Kafka; the outbox fenced from 1 to the end of 2 (schema/outbox.py:
   no other message commits in between, ahead of them);
3. the connector re-pointed at the new primary: stopped, its offsets deleted (an LSN
   of the old timeline), its config PUT with database.port, resumed;
4. cdc_node_file updated: done (a follower killed before is repeated from 1).
No failover logic beyond that: pg_auto_failover promotes, every process reconnects
through its two-host DSN.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import httpx
import psycopg2
import structlog
from prometheus_client import Counter, Gauge

from paystream.connectors import registration
from paystream.connectors.endpoint import rest_auth
from paystream.notify import republish as notify_republish
from paystream.notify.seal import process_sealer
from paystream.schema import outbox, republish
from paystream.schema.db import PostgresAddress, connect
from paystream.stack import postgres, standby
from paystream.stack.process import StackError, read_pid, start_detached, stop_pid
from paystream.stack.settings import StackSettings

log = structlog.get_logger()
COMPONENT = "failover-follower"
DROP_STALE_SLOT = (
    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
    " WHERE slot_name = 'paystream_outbox' AND NOT active;\n")

REPUBLISHED = Counter("paystream_cdc_republished_total", "published again through the "
                      "outbox after a failover: events still received (kind=event), "
                      "settlements not applied (kind=settlement), notification intents "
                      "not recorded (kind=intent)", ["kind"])
FOLLOWED = Counter("paystream_failovers_followed_total", "failovers after which the "
                   "connector was re-pointed at the new primary")
SYNC_STANDBY = Gauge("paystream_pg_sync_standby_up", "1 when the primary has a "
                     "synchronous standby streaming (pg_auto_failover: primary + secondary)")
PRIMARY_UP = Gauge("paystream_pg_primary_up", "1 when the monitor names a writable node")
LAG = Gauge("paystream_pg_replication_lag_bytes", "WAL bytes the standby has not replayed "
            "(-1: no standby)")



def pid_file(s: StackSettings) -> Path:
    return s.run_dir / f"{COMPONENT}.pid"


def log_file(s: StackSettings) -> Path:
    return s.logs_dir / f"{COMPONENT}.log"


def start(s: StackSettings) -> bool:
    """Start the follower detached (its metrics on PAYSTREAM_FAILOVER_METRICS_PORT);
    False if it runs."""
    if read_pid(pid_file(s)) is not None:
        return False
    start_detached([sys.executable, "-m", "paystream.cli", "db", "follow-failover"],
                   pid_file=pid_file(s), out_file=log_file(s), env=s.service_env())
    return True


def stop(s: StackSettings) -> bool:
    return stop_pid(pid_file(s), timeout=30)


def follow(s: StackSettings, port: int) -> dict[str, int]:
    """Steps 1-4 of the docstring for the new primary on `port`; how many of each kind
    were published again."""
    on_new = s.model_copy(update={"pg_port": port})
    # That node itself (not the two-host DSN): the slot is made there.
    conn = connect(PostgresAddress(s.pg_host, port, s.pg_db).dsn("owner"),
                   application_name="paystream-failover-follower")
    try:
        with conn, conn.cursor() as cur:
            # Fenced from the slot's creation to the republish's commit: an outbox
            # message committed in between would be decoded ahead of the republished
            # ones (a close before its hold). The fence takes no transaction id, so the
            # slot's creation, which waits for the transactions running, does not wait
            # for this one.
            outbox.fence(cur)
            fenced = time.monotonic()
            postgres.superuser_sql(on_new, DROP_STALE_SLOT + postgres.SLOT_SQL,
                                   database=s.pg_db)
            counts = {"event": republish.received_events(cur),
                      "settlement": republish.unsettled_settlements(cur),
                      "intent": notify_republish.missing_intents(cur, process_sealer())}
        log.info("outbox_fence_lifted", primary_port=port,
                 held_s=round(time.monotonic() - fenced, 3))
    finally:
        conn.close()
    for kind, count in counts.items():
        REPUBLISHED.labels(kind).inc(count)
    repoint_connector(s, port)
    s.cdc_node_file.write_text(f"{port}\n")
    FOLLOWED.inc()
    return counts


def repoint_connector(s: StackSettings, port: int, timeout: float = 60) -> None:
    """Connect's offset management (KIP-875): stop the connector, forget its offsets
    (an LSN of the old primary's timeline: Debezium refuses to start from it, "no longer
    available on the server"), point it at `port`, resume. With no offsets it streams
    from the new slot's start (snapshot.mode no_data); what came before is republished."""
    base = f"{s.connect_url}/connectors/{s.connector_name}"
    deadline = time.monotonic() + timeout
    with httpx.Client(auth=rest_auth(), timeout=30) as client:
        _expect(client.put(f"{base}/stop"), base)
        # Offsets can be deleted only once the connector and its tasks are stopped.
        while (resp := client.delete(f"{base}/offsets")).status_code != 200:
            if time.monotonic() > deadline:
                _expect(resp, base)
            time.sleep(0.5)
        registration.register(s, overrides={"database.port": str(port)})
        _expect(client.put(f"{base}/resume"), base)


def _expect(resp: httpx.Response, what: str) -> None:
    if resp.status_code >= 300:
        raise registration.RegistrationError(
            f"{resp.request.method} {what}: {resp.status_code} {resp.text[:500]}")


def observe(s: StackSettings, cfg: standby.StandbySettings) -> int | None:
    """The gauges from the monitor and the primary; the writable node's port."""
    states = standby.states(s, cfg)
    primary = standby.primary_port(s, cfg)
    PRIMARY_UP.set(primary is not None)
    SYNC_STANDBY.set(standby.settled(s, cfg))
    lag = -1
    if primary is not None and len(states) > 1:
        on_primary = s.model_copy(update={"pg_port": primary})
        try:
            out = postgres.superuser_sql(on_primary, (
                "SELECT coalesce(max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)),"
                " -1)::bigint FROM pg_stat_replication WHERE application_name LIKE"
                " 'pgautofailover_standby_%';\n" + BASEBACKUP_WAITING))
            lag_text, waiting = out.split()  # one row of each query
            lag = int(lag_text)
            if int(waiting):
                _hurry_checkpoint(on_primary)
        except (StackError, ValueError):
            pass
    LAG.set(lag)
    return primary


# A keeper rebuilding its node (the old primary after a failover) runs pg_basebackup,
# which waits for a spread checkpoint: 61 s measured under the failover test's traffic,
# the node missing as a standby all along (commits on one disk). An immediate
# CHECKPOINT ends a spread one in progress at full speed.
BASEBACKUP_WAITING = ("SELECT count(*) FROM pg_stat_progress_basebackup"
                      " WHERE phase = 'waiting for checkpoint to finish'")


def _hurry_checkpoint(on_primary: StackSettings) -> None:
    started = time.monotonic()
    postgres.superuser_sql(on_primary, "CHECKPOINT")
    log.info("basebackup_checkpoint_hurried", primary_port=on_primary.pg_port,
             took_s=round(time.monotonic() - started, 3))


def run(s: StackSettings, stop_event: threading.Event, interval: float = 1.0) -> None:
    cfg = standby.StandbySettings.from_env()
    while not stop_event.is_set():
        started = time.monotonic()
        primary = observe(s, cfg)
        if primary is not None and primary != s.cdc_port:
            log.warning("failover_detected", cdc_port=s.cdc_port, primary_port=primary)
            try:
                counts = follow(s, primary)
            except (StackError, psycopg2.Error, registration.RegistrationError,
                    httpx.HTTPError) as exc:
                # The next tick tries again: every step is safe to repeat.
                log.error("failover_follow_failed", primary_port=primary, error=str(exc))
            else:
                log.warning("failover_followed", primary_port=primary,
                            republished=counts,
                            took_s=round(time.monotonic() - started, 3))
        stop_event.wait(interval)
