"""Numbered SQL migrations, applied once each and recorded in `schema_migrations`.

A file whose first line is `-- migrate: autocommit` runs outside a transaction (needed
for statements such as creating a logical replication slot); every other file runs in
one transaction together with its bookkeeping row, so it is applied fully or not at all.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from paystream.schema.db import Connection, connect, database_url

AUTOCOMMIT_MARKER = "-- migrate: autocommit"
_LOCK_ID = 0x70617973  # advisory lock: two runners never apply the same file twice


def migration_files() -> list[tuple[str, str]]:
    """(name, sql) of every migration, ordered by its number prefix."""
    folder = resources.files("paystream.schema") / "migrations"
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".sql")),
                   key=lambda p: p.name)
    return [(Path(p.name).stem, p.read_text(encoding="utf-8")) for p in files]


def apply_migrations(dsn: str | None = None) -> list[str]:
    """Apply the pending migrations on a connection of its own (the owner's unless `dsn`
    says otherwise); return the names applied."""
    conn = connect(dsn or database_url("owner"), application_name="paystream-migrate")
    try:
        return apply_pending(conn)
    finally:
        conn.close()


def apply_pending(conn: Connection, upto: str | None = None) -> list[str]:
    """Apply the pending migrations on `conn` (left in autocommit); return the names
    applied in this call. `upto`: stop after the migration of that name (a database
    built as an older release left it: the migration tests). An advisory lock keeps two
    runners from applying one file twice."""
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
    for name, sql in migration_files():
        if upto is not None and name > upto:
            break
        if name in done:
            continue
        _apply_one(conn, name, sql)
        applied.append(name)
    with conn.cursor() as cur:
        cur.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_ID,))
    return applied


def _apply_one(conn: Connection, name: str, sql: str) -> None:
    if sql.lstrip().startswith(AUTOCOMMIT_MARKER):
        # Autocommit files must be idempotent: a crash before the bookkeeping row
        # below means the file runs again.
        with conn.cursor() as cur:
            cur.execute(sql)
            cur.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (name,))
        return
    conn.autocommit = False
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            cur.execute("INSERT INTO schema_migrations (name) VALUES (%s)", (name,))
        conn.commit()
    except Exception:
        conn.rollback()
        raise
    finally:
        conn.autocommit = True
