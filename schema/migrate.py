"""Numbered SQL migrations, applied once each and recorded in `schema_migrations`,
online: while the previous release keeps writing (docs/operations.md, "Upgrading").

A file whose first line is `-- migrate: autocommit` runs outside a transaction, one
statement at a time (needed for `CREATE INDEX CONCURRENTLY` and for creating a logical
replication slot); its statements must be idempotent, end with `;` at the end of a line,
and hold no function body. Every other file runs in one transaction together with its
bookkeeping row, so it is applied fully or not at all.

Every transaction and statement runs with a `lock_timeout` (MigrateSettings): a
migration whose lock is not granted in time gives up and is tried again after a pause,
instead of queueing for its lock while every query on the table queues behind it (a
lock waiting in line blocks all later ones). So a webhook waits at most the timeout for
a migration, however long the transaction holding the table runs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from functools import partial
from importlib import resources
from pathlib import Path

import psycopg2
import psycopg2.errors
import structlog
from psycopg2 import sql as pgsql
from pydantic import Field

from paystream.env import EnvSettings
from paystream.schema.accounts import AccountKind
from paystream.schema.db import Connection, Cursor, connect, database_url
from paystream.schema.event_types import EventType

AUTOCOMMIT_MARKER = "-- migrate: autocommit"
_LOCK_ID = 0x70617973  # advisory lock: two runners never apply the same file twice
# A statement of an autocommit file ends with `;` at the end of a line.
_STATEMENT_END = re.compile(r";[ \t]*(?:--[^\n]*)?$", re.M)
# (table, column, constraint) of each CHECK that lists the declared event types' wire
# names (0001 made it, 0009 widened it by hand; sync_event_types keeps it since), and of
# each that lists the declared account kinds (0008 made it; sync_account_kinds keeps it).
EVENT_TYPE_CHECKS = (("payment_events", "event_type", "payment_events_event_type_check"),)
ACCOUNT_KIND_CHECKS = (("accounts", "kind", "accounts_kind_check"),)
_QUOTED = re.compile(r"'((?:[^']|'')*)'")
log = structlog.get_logger("paystream.migrate")


class MigrateSettings(EnvSettings):
    """Read by `paystream migrate` and `paystream stack up`
    ([operations](operations.md#upgrading))."""

    doc_section = "Schema migrations"

    lock_timeout_ms: int = Field(1000, alias="PAYSTREAM_MIGRATE_LOCK_TIMEOUT_MS", ge=10,
                                 le=60_000, description=(
        "the longest a migration waits for a lock before it gives up and tries again "
        "(what a webhook may wait behind it)"))
    lock_tries: int = Field(30, alias="PAYSTREAM_MIGRATE_LOCK_TRIES", ge=1, description=(
        "tries of a migration (or an autocommit file's statement) whose lock was not "
        "granted, before the run fails naming what held it"))
    retry_pause_s: float = Field(1.0, alias="PAYSTREAM_MIGRATE_RETRY_PAUSE_S", ge=0,
                                 le=60, description=(
        "pause before the first retry, doubled each time up to 10 s"))


class LockNotGranted(Exception):  # noqa: N818 - a condition, the message says why
    """A migration did not get its lock within its tries; the message names it and what
    held the lock at the last try."""


def migration_files() -> list[tuple[str, str]]:
    """(name, sql) of every migration, ordered by its number prefix."""
    folder = resources.files("paystream.schema") / "migrations"
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".sql")),
                   key=lambda p: p.name)
    return [(Path(p.name).stem, p.read_text(encoding="utf-8")) for p in files]


def apply_migrations(dsn: str | None = None, settings: MigrateSettings | None = None
                     ) -> list[str]:
    """Apply the pending migrations on a connection of its own (the owner's unless `dsn`
    says otherwise); return the names applied."""
    conn = connect(dsn or database_url("owner"), application_name="paystream-migrate")
    try:
        return apply_pending(conn, settings=settings)
    finally:
        conn.close()


def apply_pending(conn: Connection, upto: str | None = None,
                  settings: MigrateSettings | None = None,
                  files: list[tuple[str, str]] | None = None) -> list[str]:
    """Apply the pending migrations on `conn` (left in autocommit); return the names
    applied in this call. `upto`: stop after the migration of that name (a database
    built as an older release left it: the migration tests); `files`: (name, sql) to
    apply instead of the shipped ones (the runner's own tests). An advisory lock keeps
    two runners from applying one file twice. With neither `upto` nor `files`, the CHECKs
    of the declared event types and account kinds are then synced with the declarations
    (sync_event_types, sync_account_kinds)."""
    settings = settings or MigrateSettings.from_env()
    applied: list[str] = []
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_lock(%s)", (_LOCK_ID,))
        cur.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " name TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        cur.execute("SELECT name FROM schema_migrations")
        done = {row[0] for row in cur.fetchall()}
    for name, sql in migration_files() if files is None else files:
        if upto is not None and name > upto:
            break
        if name in done:
            continue
        _apply_one(conn, name, sql, settings)
        applied.append(name)
    if upto is None and files is None:
        sync_event_types(conn, settings)
        sync_account_kinds(conn, settings)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
    return applied


def _apply_one(conn: Connection, name: str, sql: str, settings: MigrateSettings) -> None:
    if sql.lstrip().startswith(AUTOCOMMIT_MARKER):
        # Autocommit files must be idempotent: a crash before the bookkeeping row
        # below, or a statement tried again, means it runs again.
        for statement in statements(sql):
            _with_lock_tries(conn, name, settings, partial(_execute, sql=statement))
        with conn.cursor() as cur:
            cur.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (name,))
        return

    def whole(cur: Cursor) -> None:
        cur.execute(sql)
        cur.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (name,))

    conn.autocommit = False
    try:
        _with_lock_tries(conn, name, settings, whole)
    finally:
        conn.autocommit = True


def _execute(cur: Cursor, sql: str | pgsql.Composable) -> None:
    cur.execute(sql)


def sync_event_types(conn: Connection, settings: MigrateSettings | None = None) -> list[str]:
    """Make each CHECK of EVENT_TYPE_CHECKS allow exactly the declared event types
    (schema/event_types/); return the constraints changed (sync_declared)."""
    return sync_declared(conn, EVENT_TYPE_CHECKS, [t.value for t in EventType], settings)


def sync_account_kinds(conn: Connection, settings: MigrateSettings | None = None
                       ) -> list[str]:
    """Make each CHECK of ACCOUNT_KIND_CHECKS allow exactly the declared account kinds
    (schema/accounts.py); return the constraints changed (sync_declared)."""
    return sync_declared(conn, ACCOUNT_KIND_CHECKS, [k.value for k in AccountKind],
                         settings)


def sync_declared(conn: Connection, checks: Sequence[tuple[str, str, str]],
                  wanted: list[str], settings: MigrateSettings | None = None) -> list[str]:
    """Make each CHECK (table, column, constraint) of `checks` allow exactly the values
    `wanted` (`column IN (...)`, in that order); return the constraints changed. `conn`
    is left in autocommit.

    Online, and only when the set differs: 1. in one transaction, under the lock timeout
    and its tries, the old constraint is dropped and the new one added NOT VALID (a short
    ACCESS EXCLUSIVE lock, no scan); 2. VALIDATE scans the rows under SHARE UPDATE
    EXCLUSIVE, which lets writes go on. A run that stopped between the two validates
    next time. Removing a value whose rows remain fails at 2: the constraint then still
    refuses it in new rows, and the run names it."""
    settings = settings or MigrateSettings.from_env()
    changed: list[str] = []
    conn.autocommit = True
    for table, column, name in checks:
        found, valid = _check_values(conn, table, name)
        if found == set(wanted) and valid:
            continue
        if found != set(wanted):
            replace = pgsql.SQL(
                "ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name},"
                " ADD CONSTRAINT {name} CHECK ({column} IN ({values})) NOT VALID").format(
                table=pgsql.Identifier(table), name=pgsql.Identifier(name),
                column=pgsql.Identifier(column),
                values=pgsql.SQL(", ").join(pgsql.Literal(v) for v in wanted))
            conn.autocommit = False
            try:
                _with_lock_tries(conn, name, settings, partial(_execute, sql=replace))
            finally:
                conn.autocommit = True
        validate = pgsql.SQL("ALTER TABLE {table} VALIDATE CONSTRAINT {name}").format(
            table=pgsql.Identifier(table), name=pgsql.Identifier(name))
        _with_lock_tries(conn, name, settings, partial(_execute, sql=validate))
        log.info("declared_check_synced", constraint=name, values=wanted,
                 added=sorted(set(wanted) - (found or set())),
                 removed=sorted((found or set()) - set(wanted)))
        changed.append(name)
    return changed


def _check_values(conn: Connection, table: str, name: str) -> tuple[set[str] | None, bool]:
    """(the values CHECK `name` of `table` allows, whether it is validated); (None,
    True) if there is no such constraint."""
    with conn.cursor() as cur:
        cur.execute("SELECT pg_get_constraintdef(oid), convalidated FROM pg_constraint"
                    " WHERE conrelid = %s::regclass AND conname = %s", (table, name))
        row = cur.fetchone()
    if row is None:
        return None, True
    return {v.replace("''", "'") for v in _QUOTED.findall(row[0])}, bool(row[1])


def statements(sql: str) -> list[str]:
    """An autocommit file's statements (each ends with `;` at the end of a line)."""
    parts = (part.strip() for part in _STATEMENT_END.split(sql))
    return [part for part in parts
            if any(line.strip() and not line.strip().startswith("--")
                   for line in part.splitlines())]


def _with_lock_tries(conn: Connection, name: str, settings: MigrateSettings,
                     work: Callable[[Cursor], object]) -> None:
    """`work` with the lock timeout; a lock not granted rolls back (in a transaction),
    pauses and tries again, at most settings.lock_tries times."""
    pause = settings.retry_pause_s
    for attempt in range(1, settings.lock_tries + 1):
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT set_config('lock_timeout', %s, %s)",
                            (f"{settings.lock_timeout_ms}ms", not conn.autocommit))
                work(cur)
            if not conn.autocommit:
                conn.commit()
            return
        except psycopg2.errors.LockNotAvailable as exc:
            if not conn.autocommit:
                conn.rollback()
            holders = _lock_holders(conn)
            log.warning("migration_lock_not_granted", migration=name, attempt=attempt,
                        lock_timeout_ms=settings.lock_timeout_ms, holders=holders)
            if attempt == settings.lock_tries:
                raise LockNotGranted(
                    f"migration {name} did not get its lock within {settings.lock_tries}"
                    f" tries of {settings.lock_timeout_ms} ms ({exc.pgerror or exc});"
                    f" held by: {holders or 'nobody by now'}") from None
            time.sleep(pause)
            pause = min(pause * 2, 10.0)
        except Exception:
            if not conn.autocommit:
                conn.rollback()
            raise
        finally:
            if conn.autocommit:
                with conn.cursor() as cur:
                    cur.execute("RESET lock_timeout")


def _lock_holders(conn: Connection) -> str:
    """The likely holders: the oldest other transactions of the database (pid,
    application, state, seconds open, query, short)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pid, application_name, state,"
            " round(extract(epoch FROM now() - xact_start))::int, left(query, 80)"
            " FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
            " AND datname = current_database() AND backend_type = 'client backend'"
            " AND xact_start IS NOT NULL ORDER BY xact_start LIMIT 3")
        rows = cur.fetchall()
    if not conn.autocommit:
        conn.rollback()
    return "; ".join(f"pid {pid} ({app or '?'}, {state}, {age} s in its transaction):"
                     f" {query}" for pid, app, state, age, query in rows)
