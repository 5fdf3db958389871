"""PgBouncer: Debian's package, in transaction pooling mode, started by `paystream stack
up` when asked (`--pgbouncer` or PAYSTREAM_PGBOUNCER=1).

Processes go through it when PAYSTREAM_DB_VIA_PGBOUNCER=1 (schema.db.PostgresAddress):
the ingest, the consumers, the finality watcher and the operator commands, each as its
own role. The owner (migrations: a session advisory lock) and the CDC role (replication)
always reach Postgres itself (schema.db.SERVER_ONLY_ROLES), so neither is in its user
list. What transaction pooling forbids, and what paystream does instead, is in
docs/operations.md#pgbouncer: no session SET (role defaults, SET LOCAL), no
session advisory lock, no server-side prepared statements (psycopg2 uses none), no
LISTEN.

It runs as the `postgres` OS user (PgBouncer refuses root), its configuration, user
list (the roles' passwords, 0600), pid and log under <state_dir>/pgbouncer/, owned by
that user. Bound to 127.0.0.1.

Its variables are PgBouncerConfig's fields; its port (PAYSTREAM_PGBOUNCER_PORT) is
declared with the other database addresses (schema.db.DatabaseSettings), since every
process that goes through it reads it.
"""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Self

import psycopg2
from pydantic import Field

from paystream import credentials
from paystream.env import EnvSettings, OptIn
from paystream.schema import db
from paystream.stack import ports
from paystream.stack.packages import install_package
from paystream.stack.process import StackError, read_pid, run, stop_pid, wait_until
from paystream.stack.settings import StackSettings

COMPONENT = "pgbouncer"
OS_USER = "postgres"
# The roles that go through it: every role but the server-only ones.
POOLED_ROLES: tuple[db.DbRole, ...] = tuple(
    r for r in db.ROLE_NAMES if r not in db.SERVER_ONLY_ROLES)
# `paystream stack status` and the tests read SHOW commands as this role (stats_users:
# read-only SHOW, no PAUSE/KILL).
STATS_ROLE: db.DbRole = "ops"


class PgBouncerConfig(EnvSettings):
    """Read by `paystream stack …`, which runs PgBouncer when asked, and by every
    paystream process that connects to Postgres ([operations](operations.md#pgbouncer));
    its port and `PAYSTREAM_DB_VIA_PGBOUNCER` are with the services' addresses above."""

    doc_section = "PgBouncer"

    enabled: OptIn = Field(False, alias="PAYSTREAM_PGBOUNCER", description=(
        "`1`: `paystream stack up` starts PgBouncer (as `--pgbouncer` does); `make test` "
        "sets it"))
    # Not a variable of its own: DatabaseSettings' PAYSTREAM_PGBOUNCER_PORT (from_env).
    port: int = 6432
    # The cluster's max_connections is 200 (stack/postgres.py).
    pool_size: int = Field(20, alias="PAYSTREAM_PGBOUNCER_POOL_SIZE", ge=1, le=180,
                           description="server connections per role (Postgres allows 200)")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 overrides: Mapping[str, object] | None = None) -> Self:
        return super().from_env(env, {"port": db.pgbouncer_port(env), **(overrides or {})})


def home(s: StackSettings) -> Path:
    return s.state_dir / "pgbouncer"


def config_file(s: StackSettings) -> Path:
    return home(s) / "pgbouncer.ini"


def userlist_file(s: StackSettings) -> Path:
    return home(s) / "userlist.txt"


def pid_file(s: StackSettings) -> Path:
    return home(s) / "pgbouncer.pid"


def log_file(s: StackSettings) -> Path:
    return home(s) / "pgbouncer.log"


def config_text(s: StackSettings, cfg: PgBouncerConfig) -> str:
    return "\n".join([
        "; written by `paystream stack up` (stack/pgbouncer.py): edits are overwritten",
        "[databases]",
        f"{s.pg_db} = host={s.pg_host} port={s.pg_port} dbname={s.pg_db}",
        "",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {cfg.port}",
        "unix_socket_dir =",
        "auth_type = scram-sha-256",
        f"auth_file = {userlist_file(s)}",
        "pool_mode = transaction",
        f"default_pool_size = {cfg.pool_size}",
        "max_client_conn = 1000",
        # Transaction pooling: nothing of a session survives its transaction, so there
        # is nothing to reset between clients.
        "server_reset_query =",
        # After a Postgres restart, retry the server login every second (default 15 s:
        # the ingest would answer 503 that long).
        "server_login_retry = 1",
        # A client waiting this long for a server connection gets an error (a transient
        # one for every paystream process) rather than waiting forever.
        "query_wait_timeout = 30",
        f"stats_users = {db.ROLE_NAMES[STATS_ROLE]}",
        # Errors and pooler events only: `stack status` logs in every time it is run.
        "log_connections = 0",
        "log_disconnections = 0",
        f"logfile = {log_file(s)}",
        f"pidfile = {pid_file(s)}",
        "",
    ])


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def userlist_text(passwords: Mapping[db.DbRole, str]) -> str:
    """auth_file lines for the pooled roles. Plain passwords, not SCRAM verifiers: with a
    verifier PgBouncer could check its clients but not log in to Postgres as them."""
    return "".join(f"{_quoted(db.ROLE_NAMES[r])} {_quoted(passwords[r])}\n"
                   for r in POOLED_ROLES)


def write_files(s: StackSettings, cfg: PgBouncerConfig) -> bool:
    """The configuration and the user list, owned by the postgres user; True if either
    changed."""
    user = pwd.getpwnam(OS_USER)
    folder = home(s)
    folder.mkdir(parents=True, exist_ok=True)
    os.chown(folder, user.pw_uid, user.pw_gid)
    os.chmod(folder, 0o700)
    passwords = {r: credentials.read_secret(db.secret_name(r)) for r in POOLED_ROLES}
    changed = False
    for path, text in ((config_file(s), config_text(s, cfg)),
                       (userlist_file(s), userlist_text(passwords))):
        if path.exists() and path.read_text() == text:
            continue
        path.write_text(text)
        os.chown(path, user.pw_uid, user.pw_gid)
        os.chmod(path, 0o600)
        changed = True
    return changed


def _binary() -> str:
    found = shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)
    if found is None:
        raise StackError(COMPONENT, "the pgbouncer binary is missing (Debian package "
                         "`pgbouncer`; `paystream stack up --pgbouncer` installs it)")
    return found


def ensure_installed() -> bool:
    """Debian's package, installed the first time it is asked for; True if installed now."""
    if shutil.which("pgbouncer") or os.path.exists("/usr/sbin/pgbouncer"):
        return False
    install_package("pgbouncer")
    return True


def healthy(s: StackSettings, cfg: PgBouncerConfig | None = None) -> bool:
    """Ours and serving: SHOW VERSION answers on its port as the stats role."""
    return version(s, cfg) != "-"


def version(s: StackSettings, cfg: PgBouncerConfig | None = None) -> str:
    c = cfg or PgBouncerConfig.from_env()
    try:
        rows = show(c, "VERSION")
    except psycopg2.Error:
        return "-"
    return str(rows[0][0]).split()[-1] if rows else "-"


def show(cfg: PgBouncerConfig, what: str) -> list[tuple[object, ...]]:
    """`SHOW <what>` on the admin console (POOLS, CLIENTS, CONFIG, ...), as the stats
    role: its rows."""
    dsn = (f"postgresql://{db.ROLE_NAMES[STATS_ROLE]}@127.0.0.1:{cfg.port}/pgbouncer"
           f"?passfile={db.pgpass_path()}")
    conn = psycopg2.connect(dsn, connect_timeout=3)
    try:
        conn.autocommit = True  # the admin console has no transactions
        with conn.cursor() as cur:
            cur.execute(f"SHOW {what}")
            return list(cur.fetchall())
    finally:
        conn.close()


def start(s: StackSettings, cfg: PgBouncerConfig) -> str | bool:
    """Write the files and start PgBouncer (or have a running one reload them); wait
    until it answers. True if started."""
    changed = write_files(s, cfg)
    pid = read_pid(pid_file(s))
    if pid is not None:
        if changed:
            os.kill(pid, 1)  # SIGHUP: re-read the configuration and the user list
            return "configuration reloaded"
        return False
    ports.ensure_free(COMPONENT, cfg.port, "PAYSTREAM_PGBOUNCER_PORT")
    run(["runuser", "-u", OS_USER, "--", _binary(), "-d", str(config_file(s))], COMPONENT,
        timeout=30, log=log_file(s))
    # `-d` forks: the parent exits before the child writes its pid file, so wait for the
    # file before watching the process (a fresh CI machine lost that race once).
    wait_until(COMPONENT, "writing its pid file", lambda: read_pid(pid_file(s)) is not None,
               timeout=10, log=log_file(s), interval=0.1)
    wait_until(COMPONENT, "serving", lambda: healthy(s, cfg), timeout=30, log=log_file(s),
               pid_file=pid_file(s), interval=0.2)
    return True


def stop(s: StackSettings) -> bool:
    return stop_pid(pid_file(s), timeout=30)
