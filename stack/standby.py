"""A synchronous hot standby, failover by pg_auto_failover (Debian's
`postgresql-15-auto-failover`): a monitor and one keeper per node, run by `paystream
stack up --standby` (or PAYSTREAM_STANDBY=1) and stopped by `stack down`.

- node1 is the stack's own cluster (pg_data, PAYSTREAM_PG_PORT): made as today by
  initdb and the role/database steps, then handed to its keeper; node2 is
  pg_basebackup'ed by its keeper into <state_dir>/pgaf/node2 (PAYSTREAM_PG_STANDBY_PORT).
- Synchronous: both nodes have replication-quorum true and the formation
  number_sync_standbys 0, pg_auto_failover's default for two nodes: while the standby is
  `secondary` the primary runs with synchronous_standby_names = 'ANY 1 (...)', so a
  commit returns only once it is on both disks; when the standby is gone the monitor
  moves the primary to `wait_primary` and turns synchronous replication off, so writes
  go on (docs/operations.md#a-standby-and-failover).
- Everything pg_autoctl keeps (its configuration, state, pid files) is under
  <state_dir>/pgaf/ through the XDG variables; it runs as the `postgres` OS user.
- pg_autoctl writes its own settings (postgresql-auto-failover.conf: wal_level=replica,
  a shared_buffers of a quarter of RAM, pg_stat_statements); NODE_CONF is included after
  it and restores the stack's (logical WAL for Debezium, the write path's settings,
  WAL archiving, no extra preloaded library).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from paystream.backups import BackupSettings
from paystream.env import EnvSettings
from paystream.stack import backup, ports, postgres
from paystream.stack.packages import install_package, postgres_bin_dir
from paystream.stack.postgres import MALLOC_TUNABLES, WRITE_PATH_SETTINGS
from paystream.stack.process import (
    StackError,
    pid_alive,
    read_pid,
    run,
    start_detached,
    stop_pids,
    wait_until,
)
from paystream.stack.settings import StackSettings

COMPONENT = "pg_auto_failover"
OS_USER = "postgres"
NODE_CONF = "paystream-node.conf"
# Replication and pg_rewind between the nodes, and the monitor's health checks, as
# pg_auto_failover's own users on loopback; first in pg_hba.conf (first match wins:
# the stack's `host all all ... scram-sha-256` line would take them otherwise).
HBA_LINES = (
    "host replication pgautofailover_replicator 127.0.0.1/32 trust"
    "  # paystream standby\n"
    "host all pgautofailover_replicator 127.0.0.1/32 trust  # paystream standby\n"
    "host all pgautofailover_monitor 127.0.0.1/32 trust  # paystream standby\n")
# The reported states in which a node takes writes.
WRITABLE_STATES = frozenset({"single", "primary", "wait_primary"})


class StandbySettings(EnvSettings):
    """Read by `paystream stack …` with a standby
    ([operations](operations.md#a-standby-and-failover)); the standby's port is with the
    database addresses above (every process reads it)."""

    doc_section = "A standby and failover"

    monitor_port: int = Field(5439, alias="PAYSTREAM_PG_MONITOR_PORT", ge=1, description=(
        "the pg_auto_failover monitor's Postgres port (loopback), with a standby"))


@dataclass(frozen=True)
class PgNode:
    name: str
    port: int
    data: Path


def home(s: StackSettings) -> Path:
    return s.state_dir / "pgaf"


def nodes(s: StackSettings) -> tuple[PgNode, PgNode]:
    """node1's data is moved under pgaf/ at the hand-over (pg_data becomes a symlink to
    it): a keeper that rebuilds its node renames a fresh pg_basebackup into place, which
    the postgres user may do in pgaf/, not in the state dir (root's)."""
    return (PgNode("node1", s.pg_port, home(s) / "node1"),
            PgNode("node2", s.pg_standby_port, home(s) / "node2"))


def backup_node(s: StackSettings) -> tuple[Path, int] | None:
    """node2's folder and port for pgBackRest's stanza (stack/backup.py), with a
    standby."""
    node2 = nodes(s)[1]
    return (node2.data, node2.port) if s.standby else None


def monitor_data(s: StackSettings) -> Path:
    return home(s) / "monitor"


def monitor_uri(cfg: StandbySettings) -> str:
    return (f"postgres://autoctl_node@127.0.0.1:{cfg.monitor_port}/pg_auto_failover"
            "?sslmode=disable")


def log_file(s: StackSettings, name: str) -> Path:
    return s.logs_dir / f"pgaf-{name}.log"


def pid_file(s: StackSettings, name: str) -> Path:
    return s.run_dir / f"pgaf-{name}.pid"


def _bin_dir() -> str:
    found = postgres_bin_dir()
    if found is None:
        raise StackError(COMPONENT, "PostgreSQL server binaries not found")
    return found


def _env(s: StackSettings) -> list[str]:
    """pg_autoctl's environment: its files under the state dir, Debian's server
    binaries on PATH, and the stack's malloc tunables for the servers it starts."""
    h = home(s)
    return [f"XDG_CONFIG_HOME={h / 'config'}", f"XDG_DATA_HOME={h / 'share'}",
            f"XDG_RUNTIME_DIR={h / 'run'}", f"PATH={_bin_dir()}:/usr/bin:/bin",
            f"GLIBC_TUNABLES={MALLOC_TUNABLES}"]


def _autoctl(s: StackSettings, *args: str, timeout: float = 180) -> str:
    return run(["runuser", "-u", OS_USER, "--", "env", *_env(s), "pg_autoctl", *args],
               COMPONENT, timeout=timeout, log=log_file(s, "create"))


def ensure_installed() -> bool:
    """Debian's package for the installed server version; True if installed now."""
    if os.path.exists("/usr/bin/pg_autoctl"):
        return False
    major = os.path.basename(os.path.dirname(_bin_dir()))
    install_package(f"postgresql-{major}-auto-failover")
    return True


def _own(path: Path) -> None:
    user = pwd.getpwnam(OS_USER)
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, user.pw_uid, user.pw_gid)
    os.chmod(path, 0o700)


def registered(s: StackSettings, node: PgNode) -> bool:
    """pg_autoctl has a configuration for this node (it was created)."""
    return (home(s) / "config" / "pg_autoctl" / str(node.data).lstrip("/")
            / "pg_autoctl.cfg").exists()


def node_conf_text() -> str:
    settings = {"wal_level": "logical", "shared_preload_libraries": "",
                "logging_collector": "off", "wal_keep_size": "1GB",
                **WRITE_PATH_SETTINGS, **backup.server_settings(BackupSettings.from_env())}
    quoted = "".join(f"{k} = '{v.replace(chr(39), chr(39) * 2)}'\n"
                     for k, v in settings.items())
    return f"# written by `paystream stack up --standby` (stack/standby.py)\n{quoted}"


def prepare_node1(s: StackSettings) -> None:
    """The stack's cluster made ready for its keeper: NODE_CONF included last (after
    the include pg_autoctl appends at its create) and pg_auto_failover's users let in."""
    data = s.pg_data
    _write_node_conf(data / NODE_CONF)
    hba = data / "pg_hba.conf"
    text = hba.read_text()
    if HBA_LINES not in text:
        hba.write_text(HBA_LINES + text)


def _write_node_conf(conf: Path) -> None:
    user = pwd.getpwnam(OS_USER)
    conf.write_text(node_conf_text())
    os.chown(conf, user.pw_uid, user.pw_gid)


def refresh_node_conf(s: StackSettings) -> str | bool:
    """NODE_CONF in each node's folder as this paystream writes it (a stack converted by
    an older one keeps its copy; node2 got node1's with its basebackup), each running
    server reloaded (archive_command takes a reload); the nodes changed, or False."""
    changed = []
    for node in nodes(s):
        conf = node.data / NODE_CONF
        if not conf.exists() or conf.read_text() == node_conf_text():
            continue
        _write_node_conf(conf)
        with contextlib.suppress(StackError):  # not running: it reads it when it starts
            postgres.superuser_sql(s.model_copy(update={"pg_port": node.port}),
                                   "SELECT pg_reload_conf()")
        changed.append(node.name)
    return ", ".join(changed) or False


def include_node_conf(s: StackSettings) -> None:
    main = s.pg_data / "postgresql.conf"
    line = f"include '{NODE_CONF}'\n"
    text = main.read_text()
    if not text.endswith(line):
        main.write_text(text.replace(line, "") + line)


def ensure_monitor(s: StackSettings, cfg: StandbySettings) -> str | bool:
    """Create the monitor once, start it; True if started now."""
    data = monitor_data(s)
    _own(home(s))
    created = False
    if not (data / "PG_VERSION").exists():
        ports.ensure_free(COMPONENT, cfg.monitor_port, "PAYSTREAM_PG_MONITOR_PORT")
        _autoctl(s, "create", "monitor", "--pgdata", str(data), "--pgport",
                 str(cfg.monitor_port), "--hostname", "127.0.0.1", "--auth", "trust",
                 "--no-ssl")
        # pg_autoctl makes the monitor listen on every address: loopback only.
        _autoctl(s, "config", "set", "--pgdata", str(data),
                 "postgresql.listen_addresses", "127.0.0.1")
        created = True
    started = _start_run(s, "monitor", data)
    wait_until(COMPONENT, "monitor serving", lambda: _monitor_up(s), timeout=60,
               log=log_file(s, "monitor"))
    return "created" if created else started


def _monitor_up(s: StackSettings) -> bool:
    try:
        _autoctl(s, "show", "state", "--pgdata", str(monitor_data(s)), timeout=10)
    except StackError:
        return False
    return True


def _start_run(s: StackSettings, name: str, data: Path) -> bool:
    """`pg_autoctl run` for one node or the monitor, detached; False if it runs."""
    pid = read_pid(pid_file(s, name))
    if pid is not None and pid_alive(pid):
        return False
    start_detached(["runuser", "-u", OS_USER, "--", "env", *_env(s), "pg_autoctl", "run",
                    "--pgdata", str(data)], pid_file=pid_file(s, name),
                   out_file=log_file(s, name), cwd=Path("/tmp"))
    return True


def ensure_keeper(s: StackSettings, cfg: StandbySettings, node: PgNode) -> str | bool:
    """Register the node with the monitor once (node2: pg_basebackup from the primary),
    start its keeper; True if started now."""
    created = False
    if registered(s, node) and not (node.data / "PG_VERSION").exists():
        _forget(s, cfg, node)
    if not registered(s, node):
        # pg_autoctl stages pg_basebackup in <pgdata>/../backup/.
        _own(node.data.parent / "backup")
        primary = primary_port(s, cfg)
        # pg_basebackup asks for a spread checkpoint: with a gigabyte of dirty buffers
        # it took 4 minutes; after an immediate one it has nothing to do. Best effort:
        # a primary its keeper is just restarting has nothing dirty anyway.
        with contextlib.suppress(StackError):
            if primary is not None:
                postgres.superuser_sql(s.model_copy(update={"pg_port": primary}),
                                       "CHECKPOINT")
        ports.ensure_free(COMPONENT, node.port, "PAYSTREAM_PG_STANDBY_PORT")
        _autoctl(s, "create", "postgres", "--pgdata", str(node.data), "--pgport",
                 str(node.port), "--pghost", "/tmp", "--listen", "127.0.0.1", "--hostname",
                 "127.0.0.1", "--name", node.name, "--dbname", s.pg_db, "--monitor",
                 monitor_uri(cfg), "--skip-pg-hba", "--no-ssl", "--replication-quorum",
                 "true", timeout=600)
        if node.name == "node1":
            include_node_conf(s)
        created = True
    started = _start_run(s, node.name, node.data)
    return "created" if created else started


def _forget(s: StackSettings, cfg: StandbySettings, node: PgNode) -> None:
    """A registered node whose data folder is gone (a lost disk): its keeper cannot
    rebuild a standby in every state, so it is stopped, dropped from the monitor and
    its pg_autoctl files removed; ensure_keeper then creates it again from the primary.
    Never the writable node: the monitor would have nothing to promote."""
    if primary_port(s, cfg) == node.port:
        raise StackError(COMPONENT, f"{node.name} is the primary and its data folder "
                         f"{node.data} is missing")
    stop_pids([pid_file(s, node.name)], timeout=30)
    _autoctl(s, "drop", "node", "--monitor", monitor_uri(cfg), "--name", node.name,
             "--force", "--wait", "30")
    for kind in ("config", "share"):
        shutil.rmtree(home(s) / kind / "pg_autoctl" / str(node.data).lstrip("/"),
                      ignore_errors=True)


@dataclass(frozen=True)
class NodeState:
    name: str
    port: int
    reported: str
    assigned: str
    health: str


def states(s: StackSettings, cfg: StandbySettings) -> list[NodeState]:
    """The monitor's view of the formation's nodes (empty if it does not answer)."""
    try:
        out = run(["runuser", "-u", OS_USER, "--", f"{_bin_dir()}/psql", "-X", "-q", "-h",
                   "127.0.0.1", "-p", str(cfg.monitor_port), "-U", "autoctl_node", "-d",
                   "pg_auto_failover", "-tA", "-F", "|", "-c",
                   "SELECT nodename, nodeport, reportedstate, goalstate, health"
                   " FROM pgautofailover.node ORDER BY nodeid"], COMPONENT, timeout=10)
    except StackError:
        return []
    found = []
    for line in out.strip().splitlines():
        name, port, reported, assigned, health = line.split("|")
        found.append(NodeState(name, int(port), reported, assigned, health))
    return found


def primary_port(s: StackSettings, cfg: StandbySettings) -> int | None:
    """The port of the node the monitor names writable (reported and assigned)."""
    for st in states(s, cfg):
        if st.reported in WRITABLE_STATES and st.assigned in WRITABLE_STATES:
            return st.port
    return None


def settled(s: StackSettings, cfg: StandbySettings) -> bool:
    """A primary with its synchronous standby streaming: `primary` and `secondary`."""
    got = sorted((st.reported, st.assigned) for st in states(s, cfg))
    return got == [("primary", "primary"), ("secondary", "secondary")]


Step = Callable[[str, Callable[[], object]], object]


def form(s: StackSettings, cfg: StandbySettings, run_step: Step) -> None:
    """The monitor and both keepers, created once and started; waits for a primary
    with its synchronous standby. `run_step`: the step printer of `paystream stack up`."""
    n1, n2 = nodes(s)
    run_step(f"pg_auto_failover monitor :{cfg.monitor_port}", lambda: ensure_monitor(s, cfg))
    if not registered(s, n1):
        run_step("postgres handed to its keeper", lambda: _hand_over(s))
    run_step(f"keeper {n1.name} :{n1.port}", lambda: ensure_keeper(s, cfg, n1))
    wait_until(COMPONENT, "a writable node", lambda: primary_port(s, cfg) is not None,
               timeout=120, log=log_file(s, n1.name))
    run_step(f"keeper {n2.name} :{n2.port}", lambda: ensure_keeper(s, cfg, n2))
    # The monitor's states are its last reports: after `stack down` + `up` they name a
    # primary its keeper has not started yet. Wait for the server itself.
    wait_until(COMPONENT, "the primary taking writes", lambda: _primary_serving(s, cfg),
               timeout=120, log=log_file(s, n1.name), interval=0.5)
    run_step("synchronous standby streaming", lambda: _wait_settled(s, cfg))
    run_step(f"node settings ({NODE_CONF})", lambda: refresh_node_conf(s))
    primary = primary_port(s, cfg)
    if not s.cdc_node_file.exists() and primary is not None:
        s.cdc_node_file.write_text(f"{primary}\n")


def set_replication_quorum(s: StackSettings, node: PgNode, on: bool) -> None:
    """The node in the replication quorum (a synchronous standby) or out of it (an
    asynchronous one: the primary's synchronous_standby_names becomes ''), through its
    keeper and the monitor (`pg_autoctl set node replication-quorum`)."""
    _autoctl(s, "set", "node", "replication-quorum", "true" if on else "false",
             "--pgdata", str(node.data), timeout=60)


def _primary_serving(s: StackSettings, cfg: StandbySettings) -> bool:
    port = primary_port(s, cfg)
    if port is None:
        return False
    try:
        out = postgres.superuser_sql(s.model_copy(update={"pg_port": port}),
                                     "SELECT NOT pg_is_in_recovery()")
    except StackError:
        return False
    return out.strip() == "t"


def _wait_settled(s: StackSettings, cfg: StandbySettings) -> bool:
    """True when it had to wait (False: settled already)."""
    if settled(s, cfg):
        return False
    wait_until(COMPONENT, "primary and secondary", lambda: settled(s, cfg), timeout=300,
               log=log_file(s, "node2"), interval=0.5)
    return True


def _hand_over(s: StackSettings) -> bool:
    """The cluster `stack up` started as today (roles, database, slot made) is stopped
    and prepared; its keeper starts it from now on."""
    postgres.stop(s)
    node1 = nodes(s)[0].data
    if not s.pg_data.is_symlink():
        os.rename(s.pg_data, node1)
        s.pg_data.symlink_to(node1)
    prepare_node1(s)
    return True


def stop(s: StackSettings) -> bool:
    """Both keepers and the monitor, at once: a keeper stopped alone for long would make
    the monitor fail over. `pg_autoctl stop` signals each service (which stops its
    Postgres first); the runuser wrappers end with them."""
    datas = {"node1": s.pg_data, "node2": nodes(s)[1].data, "monitor": monitor_data(s)}
    running = [n for n in datas if (pid := read_pid(pid_file(s, n))) and pid_alive(pid)]
    for name in running:
        # On failure stop_pids below signals its wrapper.
        with contextlib.suppress(StackError):
            _autoctl(s, "stop", "--pgdata", str(datas[name]), timeout=30)
    stopped = stop_pids([pid_file(s, n) for n in running], timeout=60) or bool(running)
    # The wrappers end before the servers they stop (a fast shutdown's checkpoint): wait,
    # so a `stack up` right after finds the ports free. Only the servers of the services
    # that ran: on a stack without a standby, node1's folder is the one-node Postgres,
    # which its own step stops after this one.
    wait_until(COMPONENT, "its Postgres servers stopped",
               lambda: not any(_postmaster_alive(datas[n]) for n in running), timeout=90,
               interval=0.2)
    return stopped


def _postmaster_alive(data: Path) -> bool:
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    return pid_alive(pid)


def on_primary(s: StackSettings, cfg: StandbySettings) -> StackSettings:
    """The settings with pg_port the writable node's: what the superuser's steps (roles,
    the slot) connect to; fails when no node is writable."""
    port = primary_port(s, cfg)
    if port is None:
        raise StackError(COMPONENT, "no node is writable (pg_autoctl show state)")
    return s.model_copy(update={"pg_port": port})
