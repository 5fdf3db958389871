"""A database the previous release migrated takes this release's migrations and ends
with the schema a new database gets: the same tables and columns, indexes, constraints,
row-level security policies, functions, triggers, views and grants. An applied
migration is never run again, so an edit to one (instead of a new migration) reaches
only new databases: this is where that shows (0039 once called a function that only a
new database had). The previous release is read from git (tests/support/releases.py);
the databases are scratch ones on the test stack's Postgres."""

from __future__ import annotations

from contextlib import closing

from paystream.schema.db import Connection, connect
from paystream.schema.migrate import apply_pending, migration_files
from tests.support.migrations import scratch_database
from tests.support.releases import previous_migrations

# Each query lists one kind of schema object as text rows, for the public schema.
SCHEMA = {
    "columns": "SELECT table_name, column_name, data_type, column_default, is_nullable"
               " FROM information_schema.columns WHERE table_schema = 'public'",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes"
               " WHERE schemaname = 'public'",
    "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid),"
                   " convalidated FROM pg_constraint"
                   " WHERE connamespace = 'public'::regnamespace",
    "policies": "SELECT tablename, policyname, permissive, roles::text, cmd, qual,"
                " with_check FROM pg_policies WHERE schemaname = 'public'",
    "rls": "SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class"
           " WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p')",
    "functions": "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid),"
                 " p.proacl::text FROM pg_proc p"
                 " WHERE p.pronamespace = 'public'::regnamespace",
    "triggers": "SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)"
                " FROM pg_trigger WHERE NOT tgisinternal",
    "views": "SELECT viewname, definition FROM pg_views WHERE schemaname = 'public'",
    "grants": "SELECT grantee, table_name, privilege_type"
              " FROM information_schema.role_table_grants WHERE table_schema = 'public'",
    "partitions": "SELECT inhparent::regclass::text, inhrelid::regclass::text,"
                  " pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits"
                  " JOIN pg_class c ON c.oid = inhrelid",
}


def _schema(conn: Connection) -> dict[str, list[tuple[str, ...]]]:
    out = {}
    with conn.cursor() as cur:
        for kind, sql in SCHEMA.items():
            cur.execute(sql)
            out[kind] = sorted(tuple(str(v) for v in row) for row in cur.fetchall())
    return out


def test_the_previous_releases_database_upgrades_to_the_new_schema() -> None:
    commit, shipped = previous_migrations()
    current = migration_files()
    assert len(current) > len(shipped), "no migration since the previous release"
    with scratch_database("upgraded") as old, scratch_database("fresh") as fresh:
        with closing(connect(old.dsn("owner"))) as conn:
            assert apply_pending(conn, files=shipped)[-1] == shipped[-1][0]
            upgraded = apply_pending(conn)  # this release's, over the old release's
            assert [name for name, _ in current[len(shipped):]] == upgraded, commit
            was_upgraded = _schema(conn)
        with closing(connect(fresh.dsn("owner"))) as conn:
            apply_pending(conn)
            is_new = _schema(conn)
    for kind in SCHEMA:
        only_old = set(was_upgraded[kind]) - set(is_new[kind])
        only_new = set(is_new[kind]) - set(was_upgraded[kind])
        assert not only_old and not only_new, (
            f"{kind}: the database {commit[:10]} migrated, upgraded, differs from a new "
            f"one:\n  only upgraded: {sorted(only_old)[:5]}\n  only new: {sorted(only_new)[:5]}")
