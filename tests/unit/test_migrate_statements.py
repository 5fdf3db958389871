"""How the runner splits an autocommit migration into statements (schema/migrate.py)."""

from __future__ import annotations

from paystream.schema.migrate import statements


def test_each_statement_ends_with_a_semicolon_at_the_end_of_its_line() -> None:
    sql = ("-- migrate: autocommit\n-- why, in a comment\n"
           "DROP INDEX CONCURRENTLY IF EXISTS a_idx;\n\n"
           "CREATE INDEX CONCURRENTLY IF NOT EXISTS a_idx\n    ON t (v);  -- a note\n"
           "SELECT 'a;b' WHERE true;\n-- trailing comment only\n")
    assert [s.splitlines()[-1].strip() for s in statements(sql)] == [
        "DROP INDEX CONCURRENTLY IF EXISTS a_idx", "ON t (v)", "SELECT 'a;b' WHERE true"]


def test_a_file_of_comments_has_no_statement() -> None:
    assert statements("-- migrate: autocommit\n-- nothing yet;\n") == []
