"""Shared fixtures. Integration tests never skip: a missing service fails the test,
with the command that starts it (`paystream stack up`, which `make test` runs first)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg2
import pytest

from schema.db import connect, database_url


def unique(prefix: str) -> str:
    """An id no other test (or earlier run) uses: tests share one stack."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def db() -> Iterator[psycopg2.extensions.connection]:
    """An autocommit connection to the stack's Postgres; fails if it is not running."""
    try:
        conn = connect(database_url())
    except psycopg2.OperationalError as exc:
        pytest.fail(f"Postgres is not reachable at {database_url()} ({exc}); "
                    "run `paystream stack up` (make test does)")
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()
