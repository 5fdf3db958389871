"""Where the shared services are, and a Postgres connection factory.

Addresses come from environment variables (DatabaseSettings) with the local stack's
loopback defaults (the same variables `paystream stack up` uses), so every process finds
the same stack.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Self
from urllib.parse import quote

import psycopg2
import psycopg2.extensions
from pydantic import Field

from paystream import credentials
from paystream.env import Documented, EnvSettings, OptIn

# The one spelling of a database handle for every signature in paystream.
Connection = psycopg2.extensions.connection
Cursor = psycopg2.extensions.cursor


def one_row(cur: Cursor) -> tuple[Any, ...]:
    """The row a query that always answers one (an aggregate without GROUP BY, `SELECT
    now()`) just answered."""
    row = cur.fetchone()
    assert row is not None, "a query that always answers one row answered none"
    return row


# The database roles (least privilege: docs/configuration.md#database-roles). The owner
# (`paystream`, the name every existing stack already has) owns the database and every
# table and only runs the migrations (`paystream stack up`, `paystream migrate`); every
# long-running process logs in as its own role, granted exactly what its SQL does
# (schema/migrations/0007_roles.sql).
DbRole = Literal["owner", "ingest", "ledger", "mirror", "finality", "ops", "cdc", "api",
                 "notifier"]
ROLE_NAMES: dict[DbRole, str] = {
    "owner": "paystream",
    "ingest": "paystream_ingest",
    "ledger": "paystream_ledger",
    "mirror": "paystream_mirror",  # the dlq-mirror consumer
    "finality": "paystream_finality",
    "ops": "paystream_ops",  # the operator commands
    "cdc": "paystream_cdc",  # Kafka Connect's Debezium connector (REPLICATION)
    "api": "paystream_api",  # the merchant API (migration 0010)
    "notifier": "paystream_notifier",  # the notifier: its consumer and its sender
}
# Server-side defaults of each role's sessions (`ALTER ROLE ... SET`, run by `stack up`
# and `stack setup` with the roles: stack/postgres.py). Server-side, so they hold for
# every connection of the role, through a transaction-pooling PgBouncer too, where a
# session `SET` would stay on whichever server connection ran it and a libpq `options`
# startup parameter is refused. Bounded waits turn a stuck database into an error the
# consumers' retry loop sees (55P03, 57014: transient, the batch is retried) instead of
# a batch held past max.poll.interval.ms. The ingest bounds its own transactions more
# tightly (ingest/store.py: SET LOCAL, PAYSTREAM_INGEST_DB_STATEMENT_TIMEOUT_MS); the
# owner (migrations) and the operator commands (a full reconcile) keep no limit.
ROLE_SETTINGS: dict[DbRole, dict[str, str]] = {
    "ingest": {"lock_timeout": "2s", "statement_timeout": "2s",
               "idle_in_transaction_session_timeout": "10s"},
    "ledger": {"lock_timeout": "10s", "statement_timeout": "30s"},
    "mirror": {"lock_timeout": "10s", "statement_timeout": "30s"},
    "finality": {"lock_timeout": "10s", "statement_timeout": "30s"},
    "notifier": {"lock_timeout": "10s", "statement_timeout": "30s"},
}
# Roles that always reach Postgres itself, never a pooler: the owner runs the migrations
# under a session advisory lock (schema/migrate.py), the CDC role replicates.
SERVER_ONLY_ROLES: frozenset[DbRole] = frozenset({"owner", "cdc"})
# An explicit DSN per role, for a Postgres run elsewhere (DatabaseSettings reads them;
# this map names them for the environments the stack writes). Kafka Connect's role has
# none: Connect reads its credentials from PAYSTREAM_PG_USER / PAYSTREAM_PG_PASSWORD
# (connectors/config).
ROLE_URL_VARIABLES: dict[DbRole, str] = {
    "owner": "PAYSTREAM_OWNER_DATABASE_URL",
    "ingest": "PAYSTREAM_INGEST_DATABASE_URL",
    "ledger": "PAYSTREAM_LEDGER_DATABASE_URL",
    "mirror": "PAYSTREAM_MIRROR_DATABASE_URL",
    "finality": "PAYSTREAM_FINALITY_DATABASE_URL",
    "ops": "PAYSTREAM_OPS_DATABASE_URL",
    "api": "PAYSTREAM_API_DATABASE_URL",
    "notifier": "PAYSTREAM_NOTIFIER_DATABASE_URL",
}


def secret_name(role: DbRole) -> str:
    """The credentials secret that holds `role`'s password (`db-ingest`, ...)."""
    return f"db-{role}"


def pgpass_path() -> Path:
    """The libpq password file `paystream stack up` writes (0600): every DSN of the
    local stack names it as `passfile`, so no DSN carries a password."""
    return credentials.secrets_dir() / "pgpass"


def _pgpass_field(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def pgpass_text(passwords: Mapping[str, str]) -> str:
    """pgpass lines (any host, port and database) for {role name: password}."""
    return "".join(f"*:*:*:{_pgpass_field(user)}:{_pgpass_field(pw)}\n"
                   for user, pw in sorted(passwords.items()))


class DatabaseSettings(EnvSettings):
    """Where Postgres is: read by every paystream process that connects to it (and by
    Kafka Connect, for the connector's database settings)."""

    doc_section = "Where the services are"
    doc_extra = (
        Documented("PAYSTREAM_PG_USER", "text", "set by the stack: `paystream_cdc`",
                   "read by Kafka Connect only (the Debezium connector's login); no "
                   "paystream process reads it"),
        Documented("PAYSTREAM_PG_PASSWORD", "text",
                   "set by the stack: the generated `db-cdc` secret",
                   "read by Kafka Connect only, the connector's password; no paystream "
                   "process reads a password from the environment"),
    )

    pg_host: str = Field("127.0.0.1", alias="PAYSTREAM_PG_HOST", description=(
        "Postgres host (also the Debezium connector's, through Connect's environment)"))
    pg_port: int = Field(5433, alias="PAYSTREAM_PG_PORT", ge=1, description=(
        "Postgres port; `paystream stack up` runs the cluster on it (loopback)"))
    pg_db: str = Field("paystream", alias="PAYSTREAM_PG_DB", description="the database")
    via_pgbouncer: OptIn = Field(False, alias="PAYSTREAM_DB_VIA_PGBOUNCER", description=(
        "`1`: the ingest, the merchant API, the consumers, the finality watcher and the "
        "operator commands connect through the stack's PgBouncer instead of Postgres; the "
        "owner (migrations) and Debezium always reach Postgres"))
    pgbouncer_port: int = Field(6432, alias="PAYSTREAM_PGBOUNCER_PORT", ge=1, description=(
        "the stack's PgBouncer port, on 127.0.0.1; the test stack uses 6434"))
    standby: OptIn = Field(False, alias="PAYSTREAM_STANDBY", description=(
        "`1`: Postgres runs as two nodes under pg_auto_failover, a synchronous hot standby "
        "on `PAYSTREAM_PG_STANDBY_PORT` (as `paystream stack up --standby` does); every "
        "process connects with a two-host DSN, `target_session_attrs=read-write`, so it "
        "reaches whichever node is the primary, and bypasses PgBouncer"))
    pg_standby_port: int = Field(5438, alias="PAYSTREAM_PG_STANDBY_PORT", ge=1, description=(
        "the second Postgres node's port with `PAYSTREAM_STANDBY=1` (loopback)"))


class DatabaseRoleSettings(EnvSettings):
    """Each process logs in as its own role (least privilege), granted exactly what its
    SQL does ([`schema/migrations/0007_roles.sql`](../schema/migrations/0007_roles.sql)).
    On the local stack a process builds its DSN from the address (`PAYSTREAM_PG_HOST`,
    `PAYSTREAM_PG_PORT`, `PAYSTREAM_PG_DB`) and its role name, with no password in it: the
    password is in the libpq passfile `pgpass` in the secrets folder (0600), named by the
    DSN's `passfile=`. `paystream stack up` generates every password once (secrets
    `db-owner`, `db-ingest`, `db-ledger`, `db-mirror`, `db-finality`, `db-ops`, `db-cdc`,
    `db-api`, `db-notifier`; never a default) and sets them on each run. For a Postgres run
    elsewhere, give each process its role's DSN (least privilege) with the role's own
    variable below; a DSN may carry its password, but no paystream output prints one
    (messages show `user@host:port/db`).

    Kafka Connect's Debezium connector logs in as `paystream_cdc` (REPLICATION; SELECT on
    the outbox; writes only its heartbeat row), from `PAYSTREAM_PG_USER` /
    `PAYSTREAM_PG_PASSWORD` in Connect's environment. The stack creates the replication
    slot as the cluster's superuser (the owner may not replicate); elsewhere, create the
    slot (migration 0002) with a replicating role before the owner runs the migrations,
    and create the login roles (migration 0007 creates a missing one NOLOGIN)."""

    doc_section = "Database roles"

    database_url: str | None = Field(None, alias="PAYSTREAM_DATABASE_URL", repr=False,
                                     description=(
        "one DSN for every process (no role separation: a deployment that has a single "
        "application role); each role's own variable below wins over it"))
    owner_url: str | None = Field(None, alias="PAYSTREAM_OWNER_DATABASE_URL", repr=False,
                                  description=(
        "role `paystream`: owns the database and the tables; no long-running process. "
        "Read by `paystream stack up` / `stack setup` (migrations), `paystream migrate`"))
    ingest_url: str | None = Field(None, alias="PAYSTREAM_INGEST_DATABASE_URL", repr=False,
                                   description="role `paystream_ingest`: `paystream ingest`")
    ledger_url: str | None = Field(None, alias="PAYSTREAM_LEDGER_DATABASE_URL", repr=False,
                                   description="role `paystream_ledger`: `paystream consume "
                                               "ledger`")
    mirror_url: str | None = Field(None, alias="PAYSTREAM_MIRROR_DATABASE_URL", repr=False,
                                   description="role `paystream_mirror`: `paystream consume "
                                               "dlq-mirror`")
    finality_url: str | None = Field(None, alias="PAYSTREAM_FINALITY_DATABASE_URL",
                                     repr=False, description=(
        "role `paystream_finality`: `paystream consume finality`"))
    notifier_url: str | None = Field(None, alias="PAYSTREAM_NOTIFIER_DATABASE_URL",
                                     repr=False, description=(
        "role `paystream_notifier`: `paystream consume notifier` and `paystream notify "
        "deliver` (the only role that reads the endpoints' signing keys)"))
    ops_url: str | None = Field(None, alias="PAYSTREAM_OPS_DATABASE_URL", repr=False,
                                description=(
        "role `paystream_ops`: the operator commands: `health`, `reconcile`, "
        "`housekeeping`, `shortfalls`, `dlq`, `consume resume`, `users`, `addresses`, "
        "`balances`, `apikeys`, `holds`"))
    api_url: str | None = Field(None, alias="PAYSTREAM_API_DATABASE_URL", repr=False,
                                description="role `paystream_api`: `paystream api`, the "
                                            "merchant API")

    def role_url(self, role: DbRole) -> str | None:
        """`role`'s explicit DSN, else the one for every role, else None."""
        own: str | None = getattr(self, f"{role}_url", None)
        return own or self.database_url


class RoleSettings(EnvSettings):
    """The settings of a process that connects as one role (`db_role`): `database_url` is
    that role's DSN, built by from_env from DatabaseSettings (not a variable itself)."""

    db_role: ClassVar[DbRole]
    database_url: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None,
                 overrides: Mapping[str, object] | None = None) -> Self:
        return super().from_env(env, {"database_url": database_url(cls.db_role, env),
                                      **(overrides or {})})


@dataclass(frozen=True)
class PostgresAddress:
    """The local stack's Postgres, from the PAYSTREAM_PG_* variables: what `paystream
    stack up` starts and what every process connects to unless a DSN variable says
    otherwise. The one reader of these variables (PAYSTREAM_PG_USER and
    PAYSTREAM_PG_PASSWORD are Kafka Connect's alone: paystream processes never read a
    password from the environment)."""

    host: str
    port: int
    db: str
    # The standby node's port (PAYSTREAM_STANDBY=1): the DSN then names both nodes.
    standby_port: int | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> PostgresAddress:
        """Where paystream processes connect: the stack's PgBouncer when
        PAYSTREAM_DB_VIA_PGBOUNCER=1 (stack/pgbouncer.py), else Postgres itself. With a
        standby, always both nodes: Debian's PgBouncer 1.18 cannot pick the writable
        one (docs/operations.md#a-standby-and-failover)."""
        settings = DatabaseSettings.from_env(env)
        if settings.via_pgbouncer and not settings.standby:
            return cls(host="127.0.0.1", port=settings.pgbouncer_port, db=settings.pg_db)
        return cls.direct_from_env(env)

    @classmethod
    def direct_from_env(cls, env: Mapping[str, str] | None = None) -> PostgresAddress:
        """Postgres itself, never a pooler: the stack, the migrations (a session
        advisory lock) and Debezium (a replication connection) need the server."""
        settings = DatabaseSettings.from_env(env)
        return cls(host=settings.pg_host, port=settings.pg_port, db=settings.pg_db,
                   standby_port=settings.pg_standby_port if settings.standby else None)

    def dsn(self, role: DbRole, passfile: Path | None = None) -> str:
        """`role`'s DSN, its password in the passfile (never in the DSN). With a standby,
        libpq's multi-host form: it tries each node and keeps the one that accepts
        writes, so a process that reconnects after a failover finds the new primary."""
        where = quote(str(passfile or pgpass_path()), safe="/")
        if self.standby_port is None:
            return (f"postgresql://{ROLE_NAMES[role]}@{self.host}:{self.port}/{self.db}"
                    f"?passfile={where}")
        return (f"postgresql://{ROLE_NAMES[role]}@{self.host}:{self.port},{self.host}:"
                f"{self.standby_port}/{self.db}?passfile={where}"
                "&target_session_attrs=read-write")


def database_url(role: DbRole, env: Mapping[str, str] | None = None, *,
                 address: PostgresAddress | None = None) -> str:
    """The DSN `role` connects with: its own variable (PAYSTREAM_INGEST_DATABASE_URL, ...),
    else PAYSTREAM_DATABASE_URL (one DSN for every role: a deployment without role
    separation), else the local stack's address (PAYSTREAM_PG_*) as `role`, its password
    in the stack's passfile. `env`: where to look for the two explicit variables
    (default: the process environment); `address`: the stack's, if not the PAYSTREAM_PG_*
    one."""
    explicit = DatabaseRoleSettings.from_env(env).role_url(role)
    if explicit:
        return explicit
    if address is None:
        address = (PostgresAddress.direct_from_env() if role in SERVER_ONLY_ROLES
                   else PostgresAddress.from_env())
    return address.dsn(role)


def where(dsn: str) -> str:
    """host:port/db of a DSN, never the password it may carry: what a message may show."""
    try:
        parts = psycopg2.extensions.parse_dsn(dsn)
    except Exception:  # a DSN libpq cannot parse fails again, with its reason, in connect
        return "the configured database"
    return (f"{parts.get('user', '?')}@{parts.get('host', 'localhost')}:"
            f"{parts.get('port', '5432')}/{parts.get('dbname', '')}")


def pgbouncer_port(env: Mapping[str, str] | None = None) -> int:
    """The stack's PgBouncer port (PAYSTREAM_PGBOUNCER_PORT)."""
    return DatabaseSettings.from_env(env).pgbouncer_port


def connect(dsn: str, *, connect_timeout: int = 5,
            application_name: str = "paystream") -> Connection:
    """Open a connection with a bounded connect timeout (a dead DB must fail fast).
    `dsn`: database_url(role) for the role the caller runs as."""
    return psycopg2.connect(
        dsn,
        connect_timeout=connect_timeout,
        application_name=application_name,
    )


@contextlib.contextmanager
def snapshot(conn: Connection, *, statement_timeout_ms: int | None = None) -> Iterator[Cursor]:
    """A cursor inside one REPEATABLE READ, READ ONLY transaction: every read through it
    sees the same committed state.

    The transaction is opened by statement (`BEGIN ISOLATION LEVEL REPEATABLE READ READ
    ONLY`) on an autocommit connection and closed with COMMIT: a session setting would
    not survive a transaction-pooling PgBouncer (the next statement may run on another
    server connection); one explicit transaction does. Works on a consumer's own
    connection too (autocommit off) provided no transaction is open: autocommit is
    switched on for the duration so psycopg2 does not open its own (READ COMMITTED)
    transaction before our BEGIN. `statement_timeout_ms`: a SET LOCAL sent with the
    BEGIN (one round trip), scoped to this transaction as PgBouncer needs.
    """
    if conn.get_transaction_status() != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
        raise RuntimeError("a snapshot needs a connection with no open transaction")
    previous = conn.autocommit
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            if statement_timeout_ms is None:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            else:
                cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"
                            " SET LOCAL statement_timeout = %s", (statement_timeout_ms,))
            try:
                yield cur
            except BaseException:
                # A broken connection cannot roll back; the server ends its transaction.
                with contextlib.suppress(psycopg2.Error):
                    if not conn.closed:
                        cur.execute("ROLLBACK")
                raise
            cur.execute("COMMIT")
    finally:
        if not conn.closed:
            conn.autocommit = previous
