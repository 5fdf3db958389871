"""The stack's PostgreSQL cluster: a Debian build, run as the `postgres` OS user
(initdb and postgres refuse root), data under the state dir, wal_level=logical."""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

import psycopg2

from paystream.stack.packages import postgres_bin_dir
from paystream.stack.process import StackError, pid_alive, run, wait_until
from paystream.stack.settings import StackSettings

COMPONENT = "postgres"
OS_USER = "postgres"
# Appended once to postgresql.conf. Loopback only; logical WAL for Debezium.
CONFIG = """
# --- paystream ---
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '/tmp'
wal_level = logical
max_wal_senders = 10
max_replication_slots = 10
max_connections = 200
shared_buffers = 256MB
log_line_prefix = '%m [%p] %u@%d '
"""


def _bin(name: str) -> str:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise StackError(COMPONENT, "PostgreSQL server binaries not found")
    return os.path.join(bin_dir, name)


def log_file(s: StackSettings) -> Path:
    return s.logs_dir / "postgres.log"


def _as_postgres(args: list[str], s: StackSettings, timeout: float = 120) -> str:
    return run(["runuser", "-u", OS_USER, "--", *args], COMPONENT, timeout=timeout,
               log=log_file(s))


def _make_traversable(path: Path) -> None:
    """The postgres user must reach the data dir: add o+x to ancestors that lack it."""
    for parent in reversed(path.parents):
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(parent, mode | stat.S_IXOTH)


def ensure_cluster(s: StackSettings) -> bool:
    """initdb once; return True if the cluster was created now."""
    if (s.pg_data / "PG_VERSION").exists():
        return False
    pw = pwd.getpwnam(OS_USER)
    s.pg_data.mkdir(parents=True, exist_ok=True)
    s.logs_dir.mkdir(parents=True, exist_ok=True)
    _make_traversable(s.pg_data)
    os.chown(s.pg_data, pw.pw_uid, pw.pw_gid)
    os.chmod(s.pg_data, 0o700)
    _as_postgres([_bin("initdb"), "-D", str(s.pg_data), "-U", OS_USER, "-E", "UTF8",
                  "--locale=C.UTF-8", "--auth-local=peer", "--auth-host=scram-sha-256"], s)
    with (s.pg_data / "postgresql.conf").open("a") as fh:
        fh.write(CONFIG.format(port=s.pg_port))
    return True


def _lock_files(s: StackSettings) -> list[Path]:
    return [s.pg_data / "postmaster.pid", Path(f"/tmp/.s.PGSQL.{s.pg_port}.lock")]


def _clear_stale_locks(s: StackSettings) -> None:
    """A crashed postmaster that nobody reaped (this container's PID 1 does not) is a
    zombie: pg_ctl and postgres's own lock checks (kill 0) take it for a live server and
    refuse to start. A zombie holds no port, files or shared memory, so its lock files
    (the data dir's and the socket's) are stale."""
    for lock in _lock_files(s):
        try:
            holder = int(lock.read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            continue
        if not pid_alive(holder):
            lock.unlink(missing_ok=True)
            if lock.name.endswith(".lock"):
                Path(str(lock).removesuffix(".lock")).unlink(missing_ok=True)


def is_running(s: StackSettings) -> bool:
    _clear_stale_locks(s)
    pm = pid(s)
    if pm is None:
        return False
    try:
        run(["runuser", "-u", OS_USER, "--", _bin("pg_ctl"), "-D", str(s.pg_data), "status"],
            COMPONENT, timeout=10)
    except StackError:
        return False
    return True


def pid(s: StackSettings) -> int | None:
    try:
        return int((s.pg_data / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def start(s: StackSettings) -> bool:
    """Start the cluster if it is not running; return True if it was started now."""
    if is_running(s):
        return False
    log = log_file(s)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    pw = pwd.getpwnam(OS_USER)
    os.chown(log, pw.pw_uid, pw.pw_gid)
    _as_postgres([_bin("pg_ctl"), "-D", str(s.pg_data), "-l", str(log), "-w", "-t", "60",
                  "start"], s, timeout=90)
    wait_until(COMPONENT, "accepting connections", lambda: _superuser_ping(s),
               timeout=30, log=log)
    return True


def stop(s: StackSettings) -> bool:
    if not is_running(s):
        return False
    _as_postgres([_bin("pg_ctl"), "-D", str(s.pg_data), "-m", "fast", "-w", "-t", "60",
                  "stop"], s, timeout=90)
    return True


def _psql(s: StackSettings, sql: str) -> str:
    return _as_postgres([_bin("psql"), "-h", "/tmp", "-p", str(s.pg_port), "-U", OS_USER,
                         "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-tAc", sql], s)


def _superuser_ping(s: StackSettings) -> bool:
    return _psql(s, "SELECT 1").strip() == "1"


def ensure_role_and_database(s: StackSettings) -> bool:
    """The application role owns its database and may replicate (Debezium's slot)."""
    user, password, db = s.pg_user, s.pg_password, s.pg_db
    exists = _psql(s, f"SELECT 1 FROM pg_roles WHERE rolname = '{user}'").strip()
    verb = "ALTER" if exists == "1" else "CREATE"
    quoted = password.replace("'", "''")
    _psql(s, f'{verb} ROLE "{user}" WITH LOGIN REPLICATION PASSWORD \'{quoted}\'')
    if _psql(s, f"SELECT 1 FROM pg_database WHERE datname = '{db}'").strip() == "1":
        return False
    _psql(s, f'CREATE DATABASE "{db}" OWNER "{user}"')
    return True


def version(s: StackSettings) -> str:
    try:
        with psycopg2.connect(s.database_url, connect_timeout=2) as conn, conn.cursor() as cur:
            cur.execute("SHOW server_version")
            row = cur.fetchone()
            return str(row[0]).split()[0] if row else "?"
    except psycopg2.Error:
        return "?"


def healthy(s: StackSettings) -> bool:
    try:
        conn = psycopg2.connect(s.database_url, connect_timeout=2)
    except psycopg2.Error:
        return False
    conn.close()
    return True
