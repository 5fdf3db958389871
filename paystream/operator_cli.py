"""What every operator command shares: its exit codes, its tables, and a database
connection that ends the command with one clear message when Postgres cannot be reached.

Exit codes, the same for every command:
  0  done; clean; healthy
  1  it ran and found something to act on (a mismatch, an unhealthy check, an open
     shortfall), or refused the request (a dead letter that must not be replayed)
  2  it could not run: bad arguments, a bad setting, the database unreachable
`paystream` (paystream/cli.py) turns a CannotRunError or a SettingsError into exit 2
with the message, so a command does not handle them one by one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # psycopg2 is imported on use: `paystream --help` stays light
    from paystream.schema.db import Connection, Cursor, DbRole

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_CANNOT_RUN = 2


def iso_moment(text: str) -> datetime:
    """An argparse type: an ISO 8601 moment; one without an offset is UTC (never the
    server's zone)."""
    import argparse

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 timestamp: {text!r} (e.g. 2026-12-02T10:00:00Z)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class CannotRunError(Exception):
    """The command could not run; the message says why (exit 2)."""


@contextlib.contextmanager
def database(application_name: str, *, autocommit: bool = False,
             role: DbRole = "ops") -> Iterator[Connection]:
    """A fresh connection to the configured database as `role` (the operator's, `ops`,
    unless the command migrates: `owner`), closed at the end of the block.
    CannotRunError when Postgres does not answer."""
    import psycopg2

    from paystream.schema.db import connect, database_url

    url = database_url(role)
    try:
        conn = connect(url, application_name=application_name)
    except psycopg2.OperationalError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CannotRunError(f"cannot reach Postgres at {_where(url)}: {reason}; "
                             "is the stack up (`paystream stack up`)?") from None
    try:
        conn.autocommit = autocommit
        yield conn
    finally:
        conn.close()


@contextlib.contextmanager
def transaction(application_name: str) -> Iterator[Cursor]:
    """A cursor in one transaction of a fresh connection: committed when the block ends,
    rolled back if it raises."""
    with database(application_name) as conn, conn, conn.cursor() as cur:
        yield cur


def _where(url: str) -> str:
    """user@host:port/db of a DSN, without the password it may carry."""
    from paystream.schema.db import where

    return where(url)


def format_table(header: Sequence[str], rows: Iterable[Sequence[str]], *,
                 right_aligned: Collection[int] = (), rule: bool = False) -> str:
    """A plain text table: columns two spaces apart, each as wide as its widest cell,
    the columns in `right_aligned` (amounts, counts) flush right, a dashed rule under the
    header if asked. No trailing spaces, so a script reads a row with `split()`."""
    lines = [tuple(header), *(tuple(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]

    def render(line: Sequence[str]) -> str:
        return "  ".join(cell.rjust(w) if i in right_aligned else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(line, widths, strict=True))
                         ).rstrip()

    out = [render(line) for line in lines]
    if rule:
        out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)
