"""A scratch database built as an older release left it: the migration tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from paystream.schema.db import PostgresAddress, connect
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
