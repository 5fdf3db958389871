"""A migration the previous release shipped is never changed: a database that release
migrated has applied it already and never runs it again, so an edit reaches only new
databases and the two drift apart (an edit to 0033 and 0035 once left 0039 calling a
function that upgraded databases did not have: bench/upgrade_bench.py found it). A
change is a new migration. Comments may change; the SQL may not.

The previous release is the commit before the newest migration was added, read from
git (tests/support/releases.py)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.releases import previous_migrations

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = "schema/migrations"

# (release commit, file): why its SQL differs from what that release shipped. Only for
# a file put back to what the release before it shipped, the change made by a new
# migration instead.
RESTORED = {
    ("c6274de", "0033_merchants.sql"): "put back as 0035's release shipped it; 0040",
    ("c6274de", "0035_merchant_endpoints.sql"): "put back as shipped before; 0040",
    ("c6274de", "0039_notification_attempts_by_day.sql"): "the scalar rule; 0040 inlines",
}


def sql_only(text: str) -> str:
    """The statements without comments or layout."""
    return " ".join(re.sub(r"--[^\n]*", "", text).split())


def test_sql_only_ignores_comments_and_layout() -> None:
    assert sql_only("-- why\nCREATE  TABLE t (\n  a INT -- the a\n);") == \
        "CREATE TABLE t ( a INT );"
    assert sql_only("CREATE TABLE t (a INT);") != sql_only("CREATE TABLE t (a BIGINT);")


def test_the_previous_releases_migrations_are_unchanged() -> None:
    release, shipped = previous_migrations()
    assert shipped, "no migrations in the previous release"
    changed = []
    for name, sql in shipped:
        current = ROOT / MIGRATIONS / f"{name}.sql"
        if not current.exists():
            changed.append(f"{name}: removed or renamed")
        elif sql_only(sql) != sql_only(current.read_text()) and not any(
                release.startswith(c) and f == current.name for c, f in RESTORED):
            changed.append(f"{name}: its SQL differs from what {release[:10]} shipped")
    assert changed == [], "write a new migration instead:\n" + "\n".join(changed)
