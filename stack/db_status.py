"""`paystream db status`: every database node (today one, the primary; a standby is one
more row of the same shape), WAL archiving and the newest backup."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from paystream.backups import Backup, BackupInfoError, BackupSettings, backups
from paystream.operator_cli import format_table
from paystream.stack import postgres, standby
from paystream.stack.process import StackError
from paystream.stack.settings import StackSettings


@dataclass(frozen=True)
class Node:
    name: str
    role: str  # primary, standby, or down (unknown)
    port: int
    data_dir: str
    pid: int | None
    # The primary: its standbys' state and lag (none yet); a standby: its own.
    replication: str
    lag_bytes: int | None
    # With a standby: the pg_auto_failover monitor's reported state (primary,
    # secondary, wait_primary, demoted, ...); "-" on a one-node stack.
    monitor_state: str = "-"


@dataclass(frozen=True)
class Archiving:
    archived_count: int
    last_archived_wal: str | None
    last_archived_time: str | None
    failed_count: int
    last_failed_wal: str | None
    last_failed_time: str | None

    @property
    def failing(self) -> bool:
        """The last attempt failed and none succeeded since."""
        return self.last_failed_time is not None and (
            self.last_archived_time is None or self.last_failed_time > self.last_archived_time)


@dataclass(frozen=True)
class Status:
    nodes: list[Node]
    archiving: Archiving | None
    newest_backup: Backup | None
    backup_error: str | None
    max_age_s: float
    # With a standby: whether the primary has its synchronous standby (None: no standby).
    sync_standby: bool | None = None

    @property
    def problems(self) -> list[str]:
        found = [f"node {n.name} is down" for n in self.nodes if n.role == "down"]
        if self.sync_standby is False:
            found.append("no synchronous standby: commits are on one disk only")
        if self.archiving is not None and self.archiving.failing:
            found.append(f"WAL archiving fails (last failed {self.archiving.last_failed_wal}"
                         f" at {self.archiving.last_failed_time})")
        if self.backup_error:
            found.append(f"backups unreadable: {self.backup_error}")
        elif self.newest_backup is None:
            found.append("no backup in the repository")
        elif self.newest_backup.age_s() > self.max_age_s:
            found.append(f"the newest backup is {self.newest_backup.age_s() / 3600:.1f} h old"
                         f" (more than {self.max_age_s / 3600:g} h)")
        return found

    def as_json(self) -> dict[str, Any]:
        newest = None
        if self.newest_backup is not None:
            b = self.newest_backup
            newest = {**asdict(b), "started": b.started.isoformat(),
                      "stopped": b.stopped.isoformat(), "age_s": round(b.age_s(), 1)}
        return {"nodes": [asdict(n) for n in self.nodes],
                "archiving": None if self.archiving is None else asdict(self.archiving),
                "newest_backup": newest, "backup_error": self.backup_error,
                "sync_standby": self.sync_standby,
                "problems": self.problems}


def _primary(s: StackSettings, name: str = "pg1", port: int | None = None,
             data: Path | None = None) -> tuple[Node, Archiving | None]:
    """One node's row (the one-node stack's pg1 by default); its archiver's state."""
    port = s.pg_port if port is None else port
    data = s.pg_data if data is None else data
    try:
        row = postgres.superuser_sql(s.model_copy(update={"pg_port": port}), (
            "WITH standbys AS (SELECT * FROM pg_stat_replication WHERE pid NOT IN"
            "  (SELECT active_pid FROM pg_replication_slots"
            "   WHERE slot_type = 'logical' AND active_pid IS NOT NULL))"
            " SELECT pg_is_in_recovery(),"
            " (SELECT count(*) FROM standbys),"
            " coalesce((SELECT string_agg(application_name || ' ' || state || ' ' || sync_state"
            "   || ' replay lag '"
            "   || coalesce(replay_lag::text, '0'), '; ') FROM standbys), ''),"
            " coalesce((SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn))"
            "           FROM standbys), -1)::bigint,"
            " archived_count, coalesce(last_archived_wal, ''),"
            " coalesce(last_archived_time::text, ''), failed_count,"
            " coalesce(last_failed_wal, ''), coalesce(last_failed_time::text, '')"
            " FROM pg_stat_archiver")).strip().split("|")
    except StackError:
        return Node(name, "down", port, str(data), None, "-", None), None
    recovery, standbys, detail, lag = row[0] == "t", int(row[1]), row[2], int(row[3])
    replication = (detail or "no standby") if not recovery else "in recovery"
    node = Node(name, "standby" if recovery else "primary", port, str(data),
                _pid(data), replication if standbys or recovery else "no standby",
                None if lag < 0 else lag)
    archiving = Archiving(int(row[4]), row[5] or None, row[6] or None, int(row[7]),
                          row[8] or None, row[9] or None)
    return node, archiving


def _pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _standby_nodes(s: StackSettings) -> tuple[list[Node], Archiving | None, bool]:
    """Both nodes of a stack with a standby, each with the monitor's state; the
    primary's archiver; whether its synchronous standby streams."""
    cfg = standby.StandbySettings.from_env()
    states = {st.port: st.reported for st in standby.states(s, cfg)}
    found, archiving = [], None
    for pg in standby.nodes(s):
        node, node_archiving = _primary(s, pg.name, pg.port, pg.data)
        node = replace(node, monitor_state=states.get(pg.port, "unknown"))
        if node.role == "primary":
            archiving = node_archiving
        found.append(node)
    lag = next((n.lag_bytes for n in found if n.role == "primary"), None)
    found = [replace(n, lag_bytes=lag) if n.role == "standby" else n for n in found]
    return found, archiving, standby.settled(s, cfg)


def read(s: StackSettings, settings: BackupSettings) -> Status:
    sync = None
    if s.standby:
        nodes, archiving, sync = _standby_nodes(s)
    else:
        node, archiving = _primary(s)
        nodes = [node]
    error, newest = None, None
    try:
        found = backups(settings)
        newest = found[-1] if found else None
    except BackupInfoError as exc:
        error = str(exc)
    return Status(nodes, archiving, newest, error, settings.max_age_s, sync)


def render(status: Status) -> str:
    lines = [format_table(
        ("node", "role", "port", "data_dir", "pid", "replication", "lag_bytes", "monitor"),
        [(n.name, n.role, str(n.port), n.data_dir, str(n.pid or "-"), n.replication,
          "-" if n.lag_bytes is None else str(n.lag_bytes), n.monitor_state)
         for n in status.nodes])]
    a = status.archiving
    if a is not None:
        lines.append(f"WAL archiving: {a.archived_count} archived, last "
                     f"{a.last_archived_wal or '-'} at {a.last_archived_time or '-'};"
                     f" {a.failed_count} failed"
                     + (f", last {a.last_failed_wal} at {a.last_failed_time}"
                        if a.last_failed_time else ""))
    b = status.newest_backup
    if b is not None:
        now = datetime.now(UTC)
        lines.append(f"newest backup: {b.label} ({b.type}) stopped {b.stopped.isoformat()}"
                     f", {b.age_s(now) / 3600:.1f} h ago, WAL {b.wal_start}..{b.wal_stop}")
    for problem in status.problems:
        lines.append(f"PROBLEM: {problem}")
    return "\n".join(lines)
