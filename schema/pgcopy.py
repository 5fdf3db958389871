"""Rows into Postgres with COPY (text format): the ledger's bulk writes.

COPY costs Postgres less per row than INSERT ... unnest or VALUES (journal rows ~40 %
less, and the same for the idempotency claim: docs/benchmarks.md). One implementation
of the text format's escaping, so no writer gets it wrong.
"""

from __future__ import annotations

import io
from collections.abc import Iterable

from paystream.schema.db import Cursor


def copy_text(value: str) -> str:
    """`value` as one field of COPY's text format: backslash, tab, newline and carriage
    return are escaped (event ids may hold a backslash; the contract rules out the
    others, the escaping is total anyway)."""
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return (value.replace("\\", "\\\\").replace("\t", "\\t")
                .replace("\n", "\\n").replace("\r", "\\r"))
    return value


def copy_rows(cur: Cursor, statement: str, lines: Iterable[str]) -> None:
    """Run `statement` (COPY <table> (<columns>) FROM STDIN) with `lines`, each a row of
    tab-separated fields already passed through copy_text, ending in a newline."""
    cur.copy_expert(statement, io.StringIO("".join(lines)))
