"""The migration linter (squawk, configured in .squawk.toml) over schema/migrations/:
every shipped migration passes it, and a migration that would block the ingest's writes
(a plain CREATE INDEX on payment_events) fails it, as would any later file."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from paystream.schema.migrate import AUTOCOMMIT_MARKER

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "schema" / "migrations"
SQUAWK = shutil.which("squawk", path=str(Path(sys.executable).parent)) or "squawk"


def lint(*files: Path) -> subprocess.CompletedProcess[str]:
    """squawk over `files`, each linted as the runner applies it: in a transaction,
    or not (an autocommit file)."""
    autocommit = [f for f in files if f.read_text().lstrip().startswith(AUTOCOMMIT_MARKER)]
    output, code = "", 0
    for group, flag in (([f for f in files if f not in autocommit],
                         "--assume-in-transaction"),
                        (autocommit, "--no-assume-in-transaction")):
        if group:
            done = subprocess.run(
                [SQUAWK, "-c", str(ROOT / ".squawk.toml"), "--reporter", "gcc", flag,
                 "--no-error-on-unmatched-pattern", *map(str, group)],
                capture_output=True, text=True, timeout=60, cwd=ROOT)
            output += done.stdout + done.stderr
            code = max(code, done.returncode)
    return subprocess.CompletedProcess([SQUAWK], code, output, "")


def test_every_shipped_migration_passes_the_linter() -> None:
    done = lint(*sorted(MIGRATIONS.glob("*.sql")))
    assert done.returncode == 0, done.stdout


def _next_number() -> int:
    return max(int(p.name[:4]) for p in MIGRATIONS.glob("*.sql")) + 1


@pytest.mark.parametrize(("sql", "rule"), [
    ("CREATE INDEX payment_events_x_idx ON payment_events (user_id);\n",
     "require-concurrent-index-creation"),
    ("ALTER TABLE payment_events ADD CONSTRAINT amount_positive CHECK (amount > 0);\n",
     "constraint-missing-not-valid"),
    ("ALTER TABLE payment_events ALTER COLUMN provider TYPE varchar(100);\n",
     "changing-column-type"),
    ("DROP INDEX payment_events_trace_idx;\n", "require-concurrent-index-deletion"),
])
def test_a_blocking_migration_after_the_last_one_fails_naming_its_rule(
        tmp_path: Path, sql: str, rule: str) -> None:
    migration = tmp_path / "schema" / "migrations" / f"{_next_number():04d}_blocking.sql"
    migration.parent.mkdir(parents=True)
    migration.write_text(sql)
    done = lint(migration)
    assert done.returncode != 0 and rule in done.stdout, done.stdout


def test_the_online_way_of_the_same_passes(tmp_path: Path) -> None:
    folder = tmp_path / "schema" / "migrations"
    folder.mkdir(parents=True)
    number = _next_number()
    index = folder / f"{number:04d}_index.sql"
    index.write_text(f"{AUTOCOMMIT_MARKER}\n"
                     "DROP INDEX CONCURRENTLY IF EXISTS payment_events_x_idx;\n"
                     "CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_events_x_idx"
                     " ON payment_events (user_id);\n")
    check = folder / f"{number + 1:04d}_check.sql"
    check.write_text("ALTER TABLE payment_events ADD CONSTRAINT amount_positive"
                     " CHECK (amount > 0) NOT VALID;\n")
    validate = folder / f"{number + 2:04d}_validate.sql"
    validate.write_text("ALTER TABLE payment_events VALIDATE CONSTRAINT amount_positive;\n")
    done = lint(index, check, validate)
    assert done.returncode == 0, done.stdout
