"""`paystream stack up | down | status | logs`: the whole local stack, no Docker.

`up` is idempotent: every step checks before it acts, so running it again on a healthy
stack changes nothing, and running it on a fresh machine installs and starts everything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from paystream import kafka_security
from paystream.backups import BackupSettings
from paystream.connectors.endpoint import rest_client
from paystream.env import SettingsError
from paystream.notify import seal
from paystream.operator_cli import format_table
from paystream.schema.db import where
from paystream.schema.migrate import apply_migrations
from paystream.stack import (
    alertmanager,
    anvil,
    backup,
    compose,
    connect,
    kafka,
    pgbouncer,
    postgres,
    prometheus,
    quorum,
    scratch,
    standby,
)
from paystream.stack import failover_follower as follower
from paystream.stack.packages import ensure_packages
from paystream.stack.process import StackError, read_pid, tail_file, wait_until
from paystream.stack.settings import StackSettings


def _step(name: str, action: Callable[[], object]) -> object:
    """Run one step of `up`, printing what it did and how long it took."""
    print(f"  {name:<34}", end="", flush=True)
    started = time.monotonic()
    result = action()
    elapsed = time.monotonic() - started
    if result is True:
        detail = "done"
    elif result is False or result is None or result == []:
        detail = "already done"
    else:
        detail = str(result)
    print(f"{detail:<40} {elapsed:6.1f} s", flush=True)
    return result


def up(s: StackSettings, with_prometheus: bool = False, with_pgbouncer: bool = False) -> int:
    print(f"paystream stack up (state: {s.state_dir})")
    if s.standby:
        # What this process starts (the follower, Connect's checks) reads it too; a
        # stack that has a standby keeps it (StackSettings.from_env).
        os.environ["PAYSTREAM_STANDBY"] = "1"
    started = time.monotonic()
    try:
        prom = prometheus.PrometheusConfig.from_env()
        bouncer = pgbouncer.PgBouncerConfig.from_env()
        backups = BackupSettings.from_env()
        s.state_dir.mkdir(parents=True, exist_ok=True)
        s.run_dir.mkdir(parents=True, exist_ok=True)
        s.logs_dir.mkdir(parents=True, exist_ok=True)
        _step("debian packages", lambda: ", ".join(ensure_packages()) or False)
        _step("postgres cluster (initdb)", lambda: postgres.ensure_cluster(s))
        _step("pgbackrest configuration", lambda: backup.ensure_config(
            s, backups, standby.backup_node(s)))
        if s.standby:
            _standby_steps(s)
        else:
            _postgres_steps(s)
        _step("pgbackrest stanza and check", lambda: backup.ensure_stanza(backups))
        if with_pgbouncer or bouncer.enabled:
            _step("pgbouncer (debian)", pgbouncer.ensure_installed)
            _step(f"pgbouncer start :{bouncer.port}", lambda: pgbouncer.start(s, bouncer))
        _step("jars (maven)", lambda: kafka.resolve_jars(s))
        _step("kafka secrets", lambda: ", ".join(kafka.ensure_secrets()) or False)
        _step("intent seal key", seal.ensure_key)
        nodes = "" if s.brokers == 1 else f" ({s.brokers} nodes)"
        _step(f"kafka storage format{nodes}", lambda: kafka.format_storage(s))
        _step(f"kafka start :{','.join(str(n.client_port) for n in s.kafka_nodes)}",
              lambda: kafka.start(s))
        _step("kafka SCRAM users", lambda: kafka.ensure_users(s))
        _step("kafka ACLs", lambda: kafka.ensure_acls(s))
        _step("kcat config (kcat -F)", lambda: str(kafka.write_kcat_config(s)))
        _step("connect as the cdc role", lambda: _stop_stale_connect(s))
        _step(f"connect start :{s.connect_port}", lambda: connect.start(s))
        _step("anvil (npm)", lambda: anvil.ensure_installed(s))
        _step(f"anvil start :{anvil.AnvilConfig.from_env().port}", lambda: anvil.start(s))
        _configure(s)
        _step("first full backup", lambda: backup.ensure_first_backup(backups))
        if s.standby:
            _step("failover follower", lambda: follower.start(s))
        if with_prometheus or prom.enabled:
            # Alertmanager first: Prometheus sends it every alert from its first rule
            # evaluation on.
            am = alertmanager.AlertmanagerConfig.from_env()
            _step(f"alertmanager start :{am.port}", lambda: alertmanager.start(s, am))
            _step(f"prometheus start :{prom.port}", lambda: prometheus.start(s, prom))
    except StackError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    print(f"stack up in {time.monotonic() - started:.1f} s")
    return 0


def _postgres_steps(s: StackSettings) -> None:
    """The one-node cluster (the default)."""
    _step("postgres huge pages", lambda: postgres.reserve_huge_pages(s))
    _step(f"postgres start :{s.pg_port}", lambda: postgres.start(s))
    _step("postgres WAL archiving", lambda: postgres.ensure_archiving(s))
    _step("postgres role and database", lambda: postgres.ensure_role_and_database(s))


def _standby_steps(s: StackSettings) -> None:
    """Two nodes under pg_auto_failover (stack/standby.py). The first time the stack's
    cluster is made as a one-node one (roles, database, slot), then handed to its keeper;
    after, the keepers start the nodes and the roles are ensured on the primary.
    pgBackRest's stanza names both nodes and finds the primary (stack/backup.py)."""
    cfg = standby.StandbySettings.from_env()
    _step("pg_auto_failover (debian)", standby.ensure_installed)
    if not standby.registered(s, standby.nodes(s)[0]):
        _postgres_steps(s)
        standby.form(s, cfg, _step)
        # pg1-path: node1's folder now (pg_data became a symlink to it).
        _step("pgbackrest configuration", lambda: backup.ensure_config(
            s, BackupSettings.from_env(), standby.backup_node(s)))
    else:
        standby.form(s, cfg, _step)
        primary = standby.on_primary(s, cfg)
        _step(f"postgres role and database :{primary.pg_port}",
              lambda: postgres.ensure_role_and_database(primary))


def _stop_stale_connect(s: StackSettings) -> bool:
    """A Connect worker started with other database credentials (before the roles: as
    the owner, with the old default password) is stopped, so the next step starts it
    with the CDC role's. True if it was stopped."""
    pid = read_pid(connect.pid_file(s))
    if pid is None:
        return False
    try:
        environ = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    except OSError:
        return False
    wanted = {f"{k}={v}".encode() for k, v in s.connect_env().items()}
    if wanted <= environ:
        return False
    return connect.stop(s)


def _configure(s: StackSettings) -> None:
    """What makes a running Postgres/Kafka/Connect a paystream stack (idempotent)."""
    _step("schema migrations", lambda: ", ".join(apply_migrations(s.database_url)) or False)
    _step(f"topics ({s.partitions} partitions)",
          lambda: ", ".join(kafka.ensure_topics(s)) or False)
    _step(f"connector {s.connector_name}", _always(lambda: connect.register(s)))
    if s.standby:
        _step("CDC on the primary", lambda: _follow_if_moved(s))
        # Postgres handed to its keeper under a running connector (a one-node stack made
        # a standby one) cut its replication connection: its task may have FAILED.
        _step("connector task restart if FAILED", lambda: _restart_failed_task(s))
    _step("connector and task RUNNING", _always(lambda: connect.wait_running(s)))


def _follow_if_moved(s: StackSettings) -> str | bool:
    """The failover follower's work, now, when the primary is not the node Debezium
    reads: the monitor may fail over as the stack comes up (seen: node1's last health
    check, from before `down`, was stale), and the follower starts after the connector's
    checks, which its task fails on the old primary, a standby now."""
    primary = standby.primary_port(s, standby.StandbySettings.from_env())
    if primary is None or primary == s.cdc_port:
        return False
    counts = follower.follow(s, primary)
    return f":{primary}, republished " + ", ".join(f"{n} {kind}s" for kind, n in counts.items())


def _restart_failed_task(s: StackSettings) -> bool:
    from paystream.connectors import task_restarter
    with rest_client() as client:
        return task_restarter.check_once(s, client).restarted


def _always(action: Callable[[], None]) -> Callable[[], bool]:
    """A step with no "already done" case: done once it returns."""
    def step() -> bool:
        action()
        return True
    return step


def setup(s: StackSettings) -> int:
    """Configure services someone else runs (docker-compose's one-shot setup service).

    With PAYSTREAM_SUPERUSER_DATABASE_URL it first does what `up` does as the cluster's
    superuser (the roles with the passwords in the secrets dir, the database, the slot),
    over that DSN; with a SASL broker it creates the Kafka users and ACLs as the admin,
    as `up` does. Then the migrations (as the owner), topics and the connector."""
    superuser = postgres.superuser_url()
    print(f"paystream stack setup (db {where(s.database_url)}, "
          f"kafka {s.kafka_bootstrap}, connect {s.connect_url})")
    try:
        if superuser:
            wait_until("postgres", "reachable as the superuser",
                       lambda: postgres.superuser_reachable(superuser), timeout=120)
            _step("postgres roles and database", lambda: postgres.ensure_roles_over_dsn(
                superuser, postgres.read_role_passwords(), s.pg_db))
        wait_until("postgres", "reachable", lambda: postgres.healthy(s), timeout=120)
        wait_until("kafka", "reachable", lambda: kafka.healthy(s), timeout=120)
        if kafka_security.security_protocol().startswith("SASL"):
            _step("kafka SCRAM users", lambda: kafka.ensure_users(s))
            _step("kafka ACLs", lambda: kafka.ensure_acls(s))
        wait_until("connect", "reachable", lambda: connect.healthy(s), timeout=300)
        _configure(s)
    except (StackError, SettingsError) as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    return 0


def compose_secrets() -> int:
    """docker-compose's one-shot secrets job (stack/compose.py)."""
    try:
        written = compose.write_all(chown=os.geteuid() == 0)
    except (OSError, SettingsError) as exc:
        print(f"paystream stack compose-secrets: FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"paystream stack compose-secrets: wrote {', '.join(written)}")
    return 0


def down(s: StackSettings) -> int:
    print(f"paystream stack down (state: {s.state_dir})")
    try:
        # Producers of data stop first: the chain and Connect, then the broker, then
        # the database.
        _step("prometheus stop", lambda: prometheus.stop(s))
        _step("alertmanager stop", lambda: alertmanager.stop(s))
        _step("anvil stop", lambda: anvil.stop(s))
        _step("failover follower stop", lambda: follower.stop(s))
        _step("connect stop", lambda: connect.stop(s))
        _step("kafka stop", lambda: kafka.stop(s))
        _step("pgbouncer stop", lambda: pgbouncer.stop(s))
        _step("scratch clusters stop", lambda: ", ".join(scratch.stop_all(s)) or False)
        _step("pg_auto_failover stop", lambda: standby.stop(s))
        _step("postgres stop", lambda: postgres.stop(s))
    except StackError as exc:
        print(f"\nFAILED: {exc}", file=sys.stderr)
        return 1
    return 0


def status(s: StackSettings) -> int:
    """A table of components; exit 0 only when every component is healthy."""
    kcat = shutil.which("kcat")
    kcat_version = "-"
    if kcat:
        out = subprocess.run([kcat, "-V"], capture_output=True, text=True).stdout
        words = out.split()
        kcat_version = words[words.index("Version") + 1] if "Version" in words else "?"
    pg_ok = postgres.healthy(s)
    node_rows, kafka_ok = _kafka_rows(s)
    connect_ok = connect.healthy(s)
    anvil_ok = anvil.healthy(s)
    state = connect.connector_state(s) if connect_ok else "unknown"
    cpid = read_pid(connect.pid_file(s))
    rows = [
        ("postgres", str(s.pg_port), str(postgres.pid(s) if pg_ok else "-"),
         postgres.version(s) if pg_ok else "-", _health(pg_ok), "-"),
        *node_rows,
        ("connect", str(s.connect_port), str(cpid or "-"),
         connect.version(s) if connect_ok else "-", _health(connect_ok),
         kafka.jvm_rss_mib(cpid)),
        (f"connector {s.connector_name}", "-", "-", "debezium", state, "-"),
        ("anvil", str(anvil.AnvilConfig.from_env().port), str(anvil.pid(s) or "-"),
         anvil.version(s), _health(anvil_ok), "-"),
        ("kcat", "-", "-", kcat_version, "installed" if kcat else "missing", "-"),
    ]
    prom, bouncer = prometheus.PrometheusConfig.from_env(), pgbouncer.PgBouncerConfig.from_env()
    prom_ok = _optional_row(rows, "prometheus", prom.enabled, prom.port,
                            read_pid(prometheus.pid_file(s)),
                            lambda: (prometheus.healthy(s, prom), prometheus.version(s, prom)))
    am = alertmanager.AlertmanagerConfig.from_env()
    am_ok = _optional_row(rows, "alertmanager", prom.enabled, am.port,
                          read_pid(alertmanager.pid_file(s)),
                          lambda: (alertmanager.healthy(s, am), alertmanager.version(am)))
    bouncer_ok = _optional_row(rows, "pgbouncer", bouncer.enabled, bouncer.port,
                               read_pid(pgbouncer.pid_file(s)),
                               lambda: (pgbouncer.healthy(s, bouncer),
                                        pgbouncer.version(s, bouncer)))
    print(format_table(("component", "port", "pid", "version", "health", "rss"), rows))
    ok = (pg_ok and kafka_ok and connect_ok and state == "RUNNING" and anvil_ok and prom_ok
          and am_ok and bouncer_ok)
    return 0 if ok else 1


def _kafka_rows(s: StackSettings) -> tuple[list[tuple[str, str, str, str, str, str]], bool]:
    """A row per Kafka node (`kafka`, or `kafka-<id>` in a cluster), healthy when it is a
    serving broker, and in a cluster which node is the active controller; True when
    every node is healthy (and a cluster has an active controller)."""
    leader = quorum.active_controller(s) if s.brokers > 1 else None
    members = kafka.registered(s)
    rows, ok = [], True
    for node in s.kafka_nodes:
        pid = read_pid(kafka.pid_file(s, node))
        up = pid is not None and kafka.serving(s, node, members)
        ok = ok and up
        health = _health(up)
        if up and leader is not None and leader.node_id == node.node_id:
            health += ",active-controller"
        rows.append((kafka.node_name(s, node), str(node.client_port), str(pid or "-"),
                     kafka.kafka_version(s), health, kafka.jvm_rss_mib(pid)))
    return rows, ok and (s.brokers == 1 or leader is not None)


def _optional_row(rows: list[tuple[str, str, str, str, str, str]], name: str, enabled: bool,
                  port: int, pid: int | None, probe: Callable[[], tuple[bool, str]]) -> bool:
    """The row of a component started only when asked (Prometheus, PgBouncer), shown when
    it is asked for or running; False if asked for and down."""
    if not enabled and pid is None:
        return True
    ok, version = probe()
    rows.append((name, str(port), str(pid or "-"), version, _health(ok),
                 kafka.jvm_rss_mib(pid)))
    return ok or not enabled


def _health(ok: bool) -> str:
    return "healthy" if ok else "down"


# Each component's logs: every node's for Kafka.
LOGS: dict[str, Callable[[StackSettings], list[Path]]] = {
    "postgres": lambda s: [postgres.log_file(s)],
    "kafka": kafka.log_files,
    "connect": lambda s: [connect.log_file(s)],
    "anvil": lambda s: [anvil.log_file(s)],
    "prometheus": lambda s: [prometheus.log_file(s)],
    "alertmanager": lambda s: [alertmanager.log_file(s)],
    "pgbouncer": lambda s: [pgbouncer.log_file(s)],
    # With a standby: the monitor's, each keeper's (their Postgres logs there too) and
    # the failover follower's.
    "standby": lambda s: [*(standby.log_file(s, n) for n in ("monitor", "node1", "node2")),
                          follower.log_file(s)],
}


def logs(s: StackSettings, component: str | None, lines: int, follow: bool) -> int:
    names = [component] if component else list(LOGS)
    paths: list[Path] = [p for n in names for p in LOGS[n](s)]
    if follow:
        return subprocess.call(["tail", "-n", str(lines), "-F", *map(str, paths)])
    for name in names:
        for path in LOGS[name](s):
            print(f"==> {name}: {path} <==")
            print(tail_file(path, lines))
    return 0
