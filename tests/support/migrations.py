"""A scratch database built as an older release left it: the migration tests; what a
CHECK the migrator keeps with the declarations allows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, replace

from paystream.schema.db import Connection, Cursor, PostgresAddress, connect
from paystream.schema.migrate import apply_pending
from paystream.stack.postgres import superuser_sql
from paystream.stack.settings import StackSettings
from tests.support.ids import unique


@contextmanager
def scratch_database(label: str) -> Iterator[PostgresAddress]:
    """An empty database of its own on the stack's Postgres, dropped afterwards."""
    settings = StackSettings.from_env()
    name = unique("paystream_" + label).replace("-", "_")
    superuser_sql(settings, f'CREATE DATABASE "{name}" OWNER paystream')
    try:
        yield replace(PostgresAddress.direct_from_env(), db=name)
    finally:
        superuser_sql(settings, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def database_at(migration: str, setup_sql: str = "", *,
                params: tuple[object, ...] | None = None) -> Iterator[PostgresAddress]:
    """A database of its own on the stack's Postgres, with the migrations up to
    `migration` applied and then `setup_sql` run as the owner; dropped afterwards."""
    with scratch_database("at_" + migration[:4]) as address:
        owner = connect(address.dsn("owner"))
        try:
            assert apply_pending(owner, upto=migration)[-1] == migration
            if setup_sql:
                with owner.cursor() as cur:
                    cur.execute(setup_sql, params)
        finally:
            owner.close()
        yield address


def allowed(db: Connection, table: str, constraint: str) -> tuple[list[str], bool]:
    """(the values CHECK `constraint` of `table` lists, in its order; whether it is
    validated): the CHECKs the migrator syncs with the declarations (schema/migrate.py
    sync_declared)."""
    with db.cursor() as cur:
        cur.execute("SELECT pg_get_constraintdef(oid), convalidated FROM pg_constraint"
                    " WHERE conrelid = %s::regclass AND conname = %s", (table, constraint))
        definition, valid = cur.fetchone()
    return [v.split("'")[1] for v in definition.split("ARRAY[")[1].split(", ")], valid


@dataclass
class UnderWrites:
    """What applying the pending migrations under a writer saw: the migrations applied,
    each write's seconds, and the writes that failed."""

    applied: list[str]
    waits: list[float]
    errors: list[BaseException]


def apply_under_writes(address: PostgresAddress, write: Callable[[Cursor, int], None]
                       ) -> UnderWrites:
    """Apply the pending migrations to `address` while a thread calls `write(cursor, n)`
    every 5 ms (n = 1, 2, ...) on an autocommit connection of its own, as a release still
    running would write, from 0.2 s before until 0.2 s after."""
    seen = UnderWrites([], [], [])
    stop = threading.Event()

    def writer() -> None:
        with closing(connect(address.dsn("owner"))) as conn:
            conn.autocommit = True
            with conn.cursor() as cur:
                while not stop.is_set():
                    started = time.monotonic()
                    try:
                        write(cur, len(seen.waits) + 1)
                    except Exception as exc:  # counted: the caller asserts none
                        seen.errors.append(exc)
                    seen.waits.append(time.monotonic() - started)
                    time.sleep(0.005)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.2)
        with closing(connect(address.dsn("owner"))) as owner:
            seen.applied = apply_pending(owner)
        time.sleep(0.2)
    finally:
        stop.set()
        thread.join()
    return seen
