"""A scratch cluster restored from the backup repository: never the live one, never
reachable by the pipeline.

- Its folder must be new or empty and not the live data dir (nor inside it, nor holding
  it); its port must be free and not the live server's or PgBouncer's.
- It is restored by pgBackRest as the `postgres` OS user, replays archived WAL up to
  the target (a time, or a named restore point) and is promoted.
- It runs with archive_mode=off (a restored copy has the live cluster's system id: its
  WAL pushed into the repository would corrupt the live archive's history), with no WAL
  sender (nothing can stream from it), its socket inside its own 0700 data dir, and
  its replication slots dropped as soon as it is promoted: Debezium's slot comes back
  with the restore, and nothing must ever read it.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from paystream.backups import BackupSettings
from paystream.schema import db
from paystream.stack import backup, ports
from paystream.stack.packages import postgres_bin_dir
from paystream.stack.pgbouncer import PgBouncerConfig
from paystream.stack.process import StackError, pid_alive, run
from paystream.stack.settings import StackSettings

COMPONENT = "restore"
OS_USER = "postgres"
LOG_NAME = "paystream-restore.log"
# The scratch server's settings, on its command line (they win over the restored files).
SCRATCH_SETTINGS = {
    "archive_mode": "off",
    "max_wal_senders": "0",
    "listen_addresses": "127.0.0.1",
    # pg_ctl -w then returns only once recovery ended and the server is promoted.
    "hot_standby": "off",
    # A scratch copy beside the live server: no gigabyte pool, no huge pages.
    "shared_buffers": "128MB",
    "huge_pages": "off",
}
_RESTORED = re.compile(r'restored log file "([0-9A-F]{24})" from archive')


class RestoreRefusedError(ValueError):
    """A folder or port a scratch cluster must not take."""


class RestoreFailedError(RuntimeError):
    """The restore or the recovery failed; the message says what is missing."""


@dataclass(frozen=True)
class Scratch:
    """A restored, promoted scratch cluster."""

    data_dir: Path
    port: int
    copy_s: float = 0.0  # pgBackRest's restore: the files copied, decrypted, unpacked
    recovery_s: float = 0.0  # the server's start: WAL replayed, promoted

    def dsn(self, s: StackSettings, role: db.DbRole = "ops") -> str:
        """`role`'s DSN on the scratch cluster (the restored roles have the live
        passwords, and the stack's passfile names any port). Never an explicit DSN
        variable's (PAYSTREAM_DATABASE_URL names the live database)."""
        return db.PostgresAddress("127.0.0.1", self.port, s.pg_db).dsn(role)

    @property
    def log(self) -> Path:
        return self.data_dir / LOG_NAME


def _bin(name: str) -> str:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise StackError(COMPONENT, "PostgreSQL server binaries not found")
    return os.path.join(bin_dir, name)


def _is_live(s: StackSettings, data_dir: Path) -> bool:
    """`data_dir` is the live data dir, inside it, or holds it."""
    target, live = data_dir.resolve(), s.pg_data.resolve()
    return target == live or live in target.parents or target in live.parents


def check_target(s: StackSettings, data_dir: Path, port: int) -> None:
    """RestoreRefusedError unless `data_dir` and `port` may take a scratch cluster."""
    target, live = data_dir.resolve(), s.pg_data.resolve()
    if _is_live(s, data_dir):
        raise RestoreRefusedError(f"{data_dir} is the live cluster's data dir ({live}) or "
                                  "holds it: restore into a scratch folder")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RestoreRefusedError(f"{data_dir} is not an empty folder: restore into a new "
                                  "or empty one")
    taken = {s.pg_port: "the live server's", PgBouncerConfig.from_env().port: "PgBouncer's"}
    if port in taken:
        raise RestoreRefusedError(f"port {port} is {taken[port]} port: choose another (--port)")
    try:
        ports.ensure_free(COMPONENT, port, "--port")
    except StackError as exc:
        raise RestoreRefusedError(str(exc)) from None


def _prepare(data_dir: Path) -> None:
    pw = pwd.getpwnam(OS_USER)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for parent in reversed(data_dir.resolve().parents):  # postgres must reach it
        mode = parent.stat().st_mode
        if not mode & 0o001:
            os.chmod(parent, mode | 0o001)
    os.chown(data_dir, pw.pw_uid, pw.pw_gid)
    os.chmod(data_dir, 0o700)


def restore(s: StackSettings, settings: BackupSettings, data_dir: Path, port: int,
            target: list[str]) -> Scratch:
    """Restore into `data_dir` with pgBackRest's recovery `target` options (e.g.
    ["--type=time", "--target=..."]), start it on `port`, wait for its promotion, drop
    its slots. RestoreFailedError (naming the WAL segment recovery stopped before, when it
    is one) if it does not come up."""
    check_target(s, data_dir, port)
    _prepare(data_dir)
    started = time.monotonic()
    try:
        backup.pgbackrest(settings, "restore", f"--pg1-path={data_dir.resolve()}",
                          "--target-action=promote", "--archive-mode=off", *target)
    except StackError as exc:
        raise RestoreFailedError(f"pgbackrest restore failed: {exc}") from None
    copied = time.monotonic()
    scratch = Scratch(data_dir.resolve(), port)
    start(scratch)
    drop_slots(scratch)
    return Scratch(scratch.data_dir, port, copied - started, time.monotonic() - copied)


def start(scratch: Scratch, timeout_s: float = 86400) -> None:
    """Start it and wait for recovery to end with its promotion (pg_ctl -w returns as
    soon as the postmaster runs); RestoreFailedError when the server exits instead."""
    options = {**SCRATCH_SETTINGS, "port": str(scratch.port),
               "unix_socket_directories": str(scratch.data_dir)}
    opts = " ".join(f"-c {name}={value}" for name, value in options.items())
    try:
        run(["runuser", "-u", OS_USER, "--", _bin("pg_ctl"), "-D", str(scratch.data_dir),
             "-l", str(scratch.log), "-w", "-t", "600", "-o", opts, "start"],
            COMPONENT, timeout=660)
    except StackError:
        raise RestoreFailedError(recovery_failure(scratch)) from None
    deadline = time.monotonic() + timeout_s
    while not _promoted(scratch):
        pm = _postmaster_pid(scratch.data_dir)
        if not pm or not pid_alive(pm):
            raise RestoreFailedError(recovery_failure(scratch))
        if time.monotonic() > deadline:
            raise RestoreFailedError(f"recovery not finished after {timeout_s:.0f} s "
                                f"(log: {scratch.log})")
        time.sleep(0.5)


def _promoted(scratch: Scratch) -> bool:
    try:
        return superuser_sql(scratch, "SELECT pg_is_in_recovery()", "postgres").strip() == "f"
    except StackError:
        return False


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def recovery_failure(scratch: Scratch) -> str:
    """What the scratch server's log says went wrong: the segment after the last one
    restored, when recovery ended before its target."""
    text = scratch.log.read_text(errors="replace") if scratch.log.exists() else ""
    restored = _RESTORED.findall(text)
    fatal = [line for line in text.splitlines() if "FATAL" in line or "PANIC" in line]
    reason = fatal[-1].split("FATAL:", 1)[-1].strip() if fatal else "the server did not start"
    if restored and "before configured recovery target" in text:
        return (f"recovery stopped after WAL segment {restored[-1]}: segment "
                f"{backup.next_segment(restored[-1])} is missing from the repository ({reason})")
    return f"{reason} (log: {scratch.log})"


def superuser_sql(scratch: Scratch, sql: str, database: str) -> str:
    """`sql` as the scratch cluster's superuser, on its private socket."""
    return run(["runuser", "-u", OS_USER, "--", _bin("psql"), "-X", "-q", "-h",
                str(scratch.data_dir), "-p", str(scratch.port), "-U", OS_USER, "-d",
                database, "-v", "ON_ERROR_STOP=1", "-tA"], COMPONENT, stdin=sql)


def drop_slots(scratch: Scratch) -> None:
    superuser_sql(scratch, "SELECT pg_drop_replication_slot(slot_name)"
                           " FROM pg_replication_slots", "postgres")


def port_of(data_dir: Path) -> int | None:
    """The port of the scratch server running on `data_dir` (postmaster.pid's 4th line)."""
    try:
        return int((data_dir / "postmaster.pid").read_text().splitlines()[3])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def _stop(data_dir: Path) -> None:
    run(["runuser", "-u", OS_USER, "--", _bin("pg_ctl"), "-D", str(data_dir), "-m", "fast",
         "-w", "-t", "60", "stop"], COMPONENT, timeout=90)


def stop_all(s: StackSettings) -> list[str]:
    """Stop the scratch servers still running under the state dir's scratch folder (a
    drill kept with --keep): `stack down` leaves no server of the stack behind. Their
    folders stay (`paystream db discard DIR`). The names of those stopped."""
    stopped = []
    for data_dir in sorted((s.state_dir / "scratch").glob("*/postmaster.pid")):
        pm = _postmaster_pid(data_dir.parent)
        if pm is not None and pid_alive(pm):
            _stop(data_dir.parent)
            stopped.append(data_dir.parent.name)
    return stopped


def discard(s: StackSettings, data_dir: Path, *, restored_here: bool = False) -> bool:
    """Stop the scratch server on `data_dir` (if it runs) and delete the folder. Refuses
    the live data dir, and a folder that holds no cluster (a mistyped path must not be
    deleted) unless the caller restored into it itself (`restored_here`: a restore that
    failed half-way). True if a server was stopped."""
    target = data_dir.resolve()
    if _is_live(s, data_dir):
        raise RestoreRefusedError(f"{data_dir} is the live cluster's data dir: never discarded")
    if (target.exists() and not restored_here and any(target.iterdir())
            and not (target / "PG_VERSION").exists()):
        raise RestoreRefusedError(f"{data_dir} holds no database cluster: not deleted")
    stopped = False
    pm = _postmaster_pid(target)
    if pm is not None and pid_alive(pm):
        _stop(target)
        stopped = True
    shutil.rmtree(target, ignore_errors=True)
    return stopped
