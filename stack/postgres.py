"""The stack's PostgreSQL cluster: a Debian build, run as the `postgres` OS user
(initdb and postgres refuse root), data under the state dir, wal_level=logical."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import pwd
import shlex
import stat
from collections.abc import Mapping
from pathlib import Path

import psycopg2
from pydantic import Field

from paystream import credentials
from paystream.backups import BackupSettings
from paystream.env import EnvSettings
from paystream.schema import db
from paystream.stack import backup, huge_pages, ports
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
log_line_prefix = '%m [%p] %u@%d '
"""
# The write path's settings, given at every start (a cluster made before them gets them
# too) and by docker-compose.yml's postgres command: checkpoints far apart. After a
# checkpoint every page the ledger touches is logged whole once: its WAL per event went
# from ~2.7 KB to ~4.6 KB in the batches right after one (docs/scaling.md); with the
# default 1 GB that happens every ~40 s at 10,000 events/s, with 4 GB every ~2.5 min.
# Durability is untouched: fsync, synchronous_commit and full_page_writes stay on.
# (wal_compression=lz4 was tried: no smaller WAL after a checkpoint, so it is not set.)
# shared_buffers 1 GB (it was 256 MB, written into postgresql.conf at initdb; this
# overrides it): the ledger inserts into three ~200-300 MB indexes of random keys
# (claims, transfers, event ids) and a 256 MB pool made its backends read ~0.9 and
# write ~1 evicted block per event themselves (pg_stat_database, pg_stat_bgwriter,
# on a 3 GB database); at 1 GB, 0.2 reads and no backend writes until the
# pool filled with dirty pages. A quarter of RAM is the usual advice; the stack shares
# its machine with two JVMs and the consumers.
WRITE_PATH_SETTINGS = {
    "max_wal_size": "4GB",
    "checkpoint_timeout": "15min",
    "shared_buffers": "1GB",
    # The pool in 2 MB pages when the kernel has them (stack/huge_pages.py).
    "huge_pages": "try",
}
# glibc's malloc, set for the server through its environment (Postgres has no setting
# for it): by default a block above the dynamic mmap threshold is mapped and unmapped
# per statement, and the heap's top trimmed, so every batch statement with a big
# argument (1,000 keys in a text[], an intents record) faulted its memory in again:
# ~4,100 fresh pages for each run of one 200,000-key unnest, ~0.9 minor faults per
# ledger event, and a fault costs ~3-4 us on these VMs. With these, a backend keeps
# what it used (up to the top pad and trim threshold) and faults it once.
MALLOC_TUNABLES = ("glibc.malloc.mmap_threshold=67108864"
                   ":glibc.malloc.trim_threshold=268435456"
                   ":glibc.malloc.top_pad=16777216")


def server_options() -> list[str]:
    """WRITE_PATH_SETTINGS as the server's `-c name=value` arguments."""
    return [arg for name, value in WRITE_PATH_SETTINGS.items()
            for arg in ("-c", f"{name}={value}")]


def start_options() -> str:
    """The live server's command-line settings (pg_ctl -o, read by a shell): the write
    path's and WAL archiving's (stack/backup.py: on the command line, so no backup
    carries them)."""
    settings = {**WRITE_PATH_SETTINGS, **backup.server_settings(BackupSettings.from_env())}
    return " ".join(f"-c {shlex.quote(f'{name}={value}')}" for name, value in settings.items())


def reserve_huge_pages(s: StackSettings) -> str | bool:
    """Before a start: the huge pages the cluster's shared memory needs, made free
    (stack/huge_pages.py); False if it runs already (its memory is mapped)."""
    if is_running(s):
        return False
    # A runtime-computed setting, which postgres -C reports only while the server is down.
    try:
        needed = int(_as_postgres([_bin("postgres"), "-D", str(s.pg_data), *server_options(),
                                   "-C", "shared_memory_size_in_huge_pages"], s).strip())
    except (StackError, ValueError):
        return "size unknown (postgres -C failed): normal pages"
    if needed <= 0:
        return "not supported here: normal pages"
    return huge_pages.reserve(needed, _huge_pages_added(s))


def _huge_pages_added(s: StackSettings) -> Path:
    """Where this stack counts the huge pages it added to the kernel's pool."""
    s.run_dir.mkdir(parents=True, exist_ok=True)
    return s.run_dir / "postgres-huge-pages"


def _bin(name: str) -> str:
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise StackError(COMPONENT, "PostgreSQL server binaries not found")
    return os.path.join(bin_dir, name)


def log_file(s: StackSettings) -> Path:
    return s.logs_dir / "postgres.log"


def _as_postgres(args: list[str], s: StackSettings, timeout: float = 120,
                 stdin: str | None = None) -> str:
    return run(["runuser", "-u", OS_USER, "--", *args], COMPONENT, timeout=timeout,
               log=log_file(s), stdin=stdin)


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
    """Start the cluster if it is not running; return True if it was started now. With
    a standby, node1's keeper runs it (stack/standby.py): a second starter would race
    it, so this waits for the keeper's restart instead."""
    if is_running(s):
        return False
    if s.standby and _keeper_runs(s):
        wait_until(COMPONENT, "restarted by its pg_auto_failover keeper",
                   lambda: is_running(s), timeout=60, log=log_file(s))
        return True
    log = log_file(s)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.touch()
    pw = pwd.getpwnam(OS_USER)
    os.chown(log, pw.pw_uid, pw.pw_gid)
    # Again at every start, not only at initdb: a state dir made 0700 since (an older
    # `paystream run` did so writing dev-secrets.env) must not keep Postgres down.
    _make_traversable(s.pg_data)
    # At every start too: stop() gave them back (`up` shows it as a step of its own).
    reserve_huge_pages(s)
    try:
        ports.ensure_free(COMPONENT, s.pg_port, "PAYSTREAM_PG_PORT")
        _as_postgres(["env", f"GLIBC_TUNABLES={MALLOC_TUNABLES}", _bin("pg_ctl"), "-D",
                      str(s.pg_data), "-l", str(log), "-w", "-t", "60",
                      "-o", start_options(), "start"], s, timeout=90)
    except StackError:
        # A start that failed keeps no gigabyte of the machine's memory reserved.
        huge_pages.release(_huge_pages_added(s))
        raise
    wait_until(COMPONENT, "accepting connections", lambda: _superuser_ping(s),
               timeout=30, log=log)
    return True


def _keeper_runs(s: StackSettings) -> bool:
    """node1's `pg_autoctl run` is alive (its pid file: stack/standby.py pid_file)."""
    try:
        keeper = int((s.run_dir / "pgaf-node1.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    return pid_alive(keeper)


def ensure_archiving(s: StackSettings) -> str | bool:
    """A running server without WAL archiving, or with another archive_command (started
    before archiving, or by an older paystream), is restarted with them: archive_mode
    takes effect only at a start. False when it archives already."""
    wanted = backup.server_settings(BackupSettings.from_env())
    now = _psql(s, "SELECT current_setting('archive_mode') || E'\\n' ||"
                   " current_setting('archive_command')").split("\n")
    if now[:2] == [wanted["archive_mode"], wanted["archive_command"]]:
        return False
    stop(s)
    start(s)
    return "restarted with archive_mode=on"


def stop(s: StackSettings) -> bool:
    if not is_running(s):
        # What a start that never came up reserved (`up` reserves in a step before it).
        huge_pages.release(_huge_pages_added(s))
        return False
    _as_postgres([_bin("pg_ctl"), "-D", str(s.pg_data), "-m", "fast", "-w", "-t", "60",
                  "stop"], s, timeout=90)
    huge_pages.release(_huge_pages_added(s))
    return True


def _psql(s: StackSettings, sql: str, database: str = "postgres") -> str:
    """Run `sql` as the cluster's superuser (peer authentication on the socket). The SQL
    goes on stdin, never on the command line: it may carry a password verifier."""
    return _as_postgres([_bin("psql"), "-X", "-q", "-h", "/tmp", "-p", str(s.pg_port),
                         "-U", OS_USER, "-d", database, "-v", "ON_ERROR_STOP=1", "-tA"],
                        s, stdin=sql)


def superuser_sql(s: StackSettings, sql: str, database: str = "postgres") -> str:
    """`sql` run as the local cluster's superuser (creating or dropping a database, say:
    what no paystream role may do); its output, tab-separated."""
    return _psql(s, sql, database)


def _superuser_ping(s: StackSettings) -> bool:
    return _psql(s, "SELECT 1").strip() == "1"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def scram_verifier(password: str, *, salt: bytes | None = None,
                   iterations: int = 4096) -> str:
    """The SCRAM-SHA-256 verifier Postgres stores for `password` (RFC 5802/7677, the
    format of pg_authid.rolpassword). Sent instead of the password itself, so not even
    the server's log of a failed statement can show the password."""
    salt = salt or os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    stored_key = hashlib.sha256(client_key).digest()
    server_key = hmac.new(salted, b"Server Key", "sha256").digest()
    b64 = base64.b64encode
    return (f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}"
            f"${b64(stored_key).decode()}:{b64(server_key).decode()}")


# The attributes of each role: only Debezium's replicates; none is superuser or may
# create databases or roles. The owner owns the database and runs the migrations.
ROLE_ATTRIBUTES = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE INHERIT"


def role_passwords() -> dict[db.DbRole, str]:
    """Each role's password, generated at the first `stack up` (never a default)."""
    return {role: credentials.ensure_secret(db.secret_name(role)) for role in db.ROLE_NAMES}


def write_pgpass(passwords: dict[db.DbRole, str]) -> Path:
    """The libpq passfile every local DSN names (0600 from its first byte)."""
    path = db.pgpass_path()
    credentials.write_private(path, db.pgpass_text(
        {db.ROLE_NAMES[role]: pw for role, pw in passwords.items()}))
    return path


def role_statements(passwords: Mapping[db.DbRole, str]) -> list[str]:
    """CREATE (if missing) and ALTER every role with its attributes and password: the
    one definition of the roles, run by both paths (`stack up` through psql, roles_sql;
    `stack setup` over a superuser DSN, ensure_roles_over_dsn). Run on every `stack up`
    / `stack setup`, so an existing stack whose owner still had the old default password
    `paystream` (and REPLICATION) gets the generated one and loses it. Each statement
    carries the password's SCRAM verifier, never the password; none takes a parameter
    (psycopg2 sends it as written, psql reads it from stdin)."""
    statements = []
    for role, name in db.ROLE_NAMES.items():
        replication = "REPLICATION" if role == "cdc" else "NOREPLICATION"
        verifier = _literal(scram_verifier(passwords[role]))
        attrs = f"{ROLE_ATTRIBUTES} {replication} PASSWORD {verifier}"
        statements.append(
            f"DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname ="
            f" {_literal(name)}) THEN CREATE ROLE \"{name}\"; END IF; END$$")
        statements.append(f'ALTER ROLE "{name}" WITH {attrs}')
        # The role's session defaults (schema.db.ROLE_SETTINGS) are exactly the listed
        # ones: RESET ALL first, so a setting dropped from the list does not linger.
        statements.append(f'ALTER ROLE "{name}" RESET ALL')
        for setting, value in db.ROLE_SETTINGS.get(role, {}).items():
            statements.append(f'ALTER ROLE "{name}" SET {setting} = {_literal(value)}')
    return statements


def roles_sql(passwords: Mapping[db.DbRole, str]) -> str:
    """role_statements as one psql script."""
    return "".join(f"{statement};\n" for statement in role_statements(passwords))


def create_database_sql(database: str) -> str:
    """The database, owned by the owner role (both paths)."""
    return f'CREATE DATABASE "{database}" OWNER "{db.ROLE_NAMES["owner"]}"'


# The slot is created by the superuser, not by a migration run as the owner: the owner
# may not replicate. Same statement as migration 0002 (which then finds the slot).
SLOT_SQL = ("SELECT pg_create_logical_replication_slot('paystream_outbox', 'pgoutput')"
            " WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots"
            " WHERE slot_name = 'paystream_outbox');\n")


def ensure_role_and_database(s: StackSettings) -> bool:
    """The roles (generated passwords, the passfile), the database owned by the owner
    role, and the replication slot Debezium reads; return True if the database was
    created now."""
    passwords = role_passwords()
    write_pgpass(passwords)
    _psql(s, roles_sql(passwords))
    created = False
    if _psql(s, f"SELECT 1 FROM pg_database WHERE datname = {_literal(s.pg_db)}").strip() \
            != "1":
        _psql(s, create_database_sql(s.pg_db))
        created = True
    _psql(s, SLOT_SQL, database=s.pg_db)
    return created


def read_role_passwords() -> dict[db.DbRole, str]:
    """Each role's password as generated before (docker-compose's secrets job): never
    generates one (MissingSecretError when one is not there)."""
    return {role: credentials.read_secret(db.secret_name(role)) for role in db.ROLE_NAMES}


class SuperuserSettings(EnvSettings):
    """Read by `paystream stack setup` only (docker-compose's setup job); given to no
    other process."""

    doc_section = "Database roles"

    url: str | None = Field(
        None, alias="PAYSTREAM_SUPERUSER_DATABASE_URL", repr=False,
        json_schema_extra={"shown": "unset: the step is skipped"},
        description="a superuser's DSN (docker-compose: `postgres`, its password "
                    "`POSTGRES_PASSWORD` from your `.env`): `stack setup` creates the roles "
                    "(passwords from the secrets dir, as SCRAM verifiers), the database "
                    "owned by `paystream` and the replication slot over it, with the same "
                    "statements `stack up` runs through psql")


def superuser_url() -> str | None:
    """A superuser's DSN for `stack setup` to create the roles, the database and the
    slot with, if one is given."""
    return SuperuserSettings.from_env().url


def superuser_reachable(superuser_dsn: str) -> bool:
    try:
        conn = psycopg2.connect(superuser_dsn, connect_timeout=2)
    except psycopg2.Error:
        return False
    conn.close()
    return True


def ensure_roles_over_dsn(superuser_dsn: str, passwords: Mapping[db.DbRole, str],
                          database: str) -> bool:
    """What ensure_role_and_database does, over a superuser DSN with psycopg2 instead of
    psql on the cluster's socket (docker-compose's setup job: the paystream image has no
    psql, and the cluster is another container): the same role statements, the database,
    the slot. Refuses a DSN whose user is not a superuser (it could not create the roles
    or the slot). Returns True if the database was created now."""
    conn = psycopg2.connect(superuser_dsn, connect_timeout=10,
                            application_name="paystream-setup")
    created = False
    try:
        conn.autocommit = True  # CREATE DATABASE runs outside a transaction
        with conn.cursor() as cur:
            cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            row = cur.fetchone()
            if not row or not row[0]:
                raise StackError(COMPONENT, f"{db.where(superuser_dsn)} is not a superuser:"
                                 " PAYSTREAM_SUPERUSER_DATABASE_URL must name one")
            for statement in role_statements(passwords):
                cur.execute(statement)
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
            if cur.fetchone() is None:
                cur.execute(create_database_sql(database))
                created = True
    finally:
        conn.close()
    conn = psycopg2.connect(superuser_dsn, dbname=database, connect_timeout=10,
                            application_name="paystream-setup")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(SLOT_SQL)
    finally:
        conn.close()
    return created


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
