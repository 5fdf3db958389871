"""The migration runner under a long transaction, on a scratch database of the test
stack's Postgres: a migration whose lock is not granted gives up after its lock_timeout
and tries again, so the writes queued behind it wait at most that long (and, with a
timeout too long to matter, they wait for the whole transaction: the measurement can
fail); tries used up name the transaction that held the lock; an autocommit file runs
its statements one by one (CREATE INDEX CONCURRENTLY cannot run in a transaction)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import replace

import pytest

from paystream.schema.db import PostgresAddress, connect
from paystream.schema.migrate import LockNotGranted, MigrateSettings, apply_pending
from paystream.stack.postgres import superuser_sql
from paystream.stack.settings import StackSettings
from tests.support.ids import unique

HOLD_S = 2.0


@contextmanager
def scratch_database() -> Iterator[PostgresAddress]:
    settings = StackSettings.from_env()
    name = unique("paystream_migrate").replace("-", "_")
    superuser_sql(settings, f'CREATE DATABASE "{name}" OWNER paystream')
    try:
        address = replace(PostgresAddress.direct_from_env(), db=name)
        with closing(connect(address.dsn("owner"))) as owner, owner.cursor() as cur:
            cur.execute("CREATE TABLE t (id serial PRIMARY KEY, v text)")
            owner.commit()
        yield address
    finally:
        superuser_sql(settings, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _settings(lock_timeout_ms: int, tries: int) -> MigrateSettings:
    return MigrateSettings.from_env({}, {"lock_timeout_ms": lock_timeout_ms,
                                         "lock_tries": tries, "retry_pause_s": 0.1})


def _migrate_behind_a_reader(address: PostgresAddress, migration: tuple[str, str],
                             settings: MigrateSettings) -> tuple[float, float, object]:
    """A reader holds `t` for HOLD_S while the migration runs and a writer inserts every
    50 ms; (the writer's longest insert, the migration's time, its result or error)."""
    holder = connect(address.dsn("owner"), application_name="test-long-reader")
    writer = connect(address.dsn("owner"))
    writer.autocommit = True
    migrator = connect(address.dsn("owner"))
    outcome: dict[str, object] = {}
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT count(*) FROM t")  # ACCESS SHARE until its commit

        def migrate() -> None:
            started = time.monotonic()
            try:
                outcome["result"] = apply_pending(migrator, settings=settings,
                                                  files=[migration])
            except LockNotGranted as exc:
                outcome["result"] = exc
            outcome["took"] = time.monotonic() - started

        thread = threading.Thread(target=migrate)
        thread.start()
        # The reader ends after HOLD_S on a timer: a writer queued behind the migration
        # cannot end it.
        ender = threading.Timer(HOLD_S, holder.commit)
        ender.start()
        time.sleep(0.1)  # the migration is waiting for its lock
        longest, until = 0.0, time.monotonic() + HOLD_S
        with writer.cursor() as cur:
            while time.monotonic() < until:
                started = time.monotonic()
                cur.execute("INSERT INTO t (v) VALUES ('during')")
                longest = max(longest, time.monotonic() - started)
                time.sleep(0.05)
        ender.join()
        thread.join(timeout=60)
        return longest, float(outcome["took"]), outcome["result"]  # type: ignore[arg-type]
    finally:
        for conn in (holder, writer, migrator):
            conn.close()


def test_a_migration_behind_a_long_transaction_never_holds_the_writers_longer_than_its_timeout(
        ) -> None:
    with scratch_database() as address:
        longest, took, result = _migrate_behind_a_reader(
            address, ("9001_add_column", "ALTER TABLE t ADD COLUMN c int;"),
            _settings(200, 100))
        assert result == ["9001_add_column"]
        assert took >= HOLD_S - 0.2  # applied once the reader was gone, on a later try
        assert longest < 0.5, f"an insert waited {longest:.2f} s behind the migration"
        with closing(connect(address.dsn("owner"))) as conn, conn.cursor() as cur:
            cur.execute("SELECT c FROM t LIMIT 1")  # the column exists
            cur.execute("SELECT name FROM schema_migrations")
            assert cur.fetchall() == [("9001_add_column",)]
        # The same without a timeout that matters: the inserts queue behind the waiting
        # ALTER for as long as the reader holds the table.
        longest, _, result = _migrate_behind_a_reader(
            address, ("9002_add_column", "ALTER TABLE t ADD COLUMN d int;"),
            _settings(60_000, 1))
        assert result == ["9002_add_column"]
        assert longest > HOLD_S - 0.5, longest


def test_tries_used_up_fail_naming_the_transaction_that_held_the_lock() -> None:
    with scratch_database() as address:
        _, took, result = _migrate_behind_a_reader(
            address, ("9003_add_column", "ALTER TABLE t ADD COLUMN e int;"),
            _settings(100, 3))
        assert isinstance(result, LockNotGranted), result
        assert "9003_add_column" in str(result) and "test-long-reader" in str(result)
        assert took < HOLD_S  # three tries of 100 ms and their pauses
        with closing(connect(address.dsn("owner"))) as conn, conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM schema_migrations")
            assert cur.fetchone() == (0,)  # nothing recorded: it can be run again
            cur.execute("SELECT count(*) FROM information_schema.columns"
                        " WHERE table_name = 't' AND column_name = 'e'")
            assert cur.fetchone() == (0,)


def test_an_autocommit_file_builds_its_index_concurrently_statement_by_statement() -> None:
    sql = ("-- migrate: autocommit\n-- a leftover invalid index goes first\n"
           "DROP INDEX CONCURRENTLY IF EXISTS t_v_idx;\n"
           "CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v_idx ON t (v); -- by value\n")
    with scratch_database() as address:
        with closing(connect(address.dsn("owner"))) as conn:
            assert apply_pending(conn, settings=_settings(1000, 3),
                                 files=[("9004_index", sql)]) == ["9004_index"]
            with conn.cursor() as cur:
                cur.execute("SELECT indisvalid FROM pg_index"
                            " WHERE indexrelid = 't_v_idx'::regclass")
                assert cur.fetchone() == (True,)
        # Run as one string, the two would be one implicit transaction, which
        # CREATE INDEX CONCURRENTLY refuses: the split is what makes the file work.
        with closing(connect(address.dsn("owner"))) as conn:
            conn.autocommit = True
            with pytest.raises(Exception, match="transaction block"), conn.cursor() as cur:
                cur.execute(sql.replace("t_v_idx", "t_v2_idx"))
