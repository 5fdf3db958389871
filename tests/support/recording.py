"""Statements as the code under test sends them, and their plans, for the plan tests:
a connection whose cursors are `Recording` appends each statement to `SENT`;
`analyzed` runs one again under EXPLAIN ANALYZE, rolled back; `nodes` walks its plan."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg2.extensions

SENT: list[bytes] = []  # every statement a Recording cursor executed, as sent


class Recording(psycopg2.extensions.cursor):
    def execute(self, query: Any, vars: Any = None) -> None:
        super().execute(query, vars)
        assert self.query is not None
        SENT.append(self.query)


def analyzed(cur: Any, statement: bytes, *, seqscan: bool = True) -> dict[str, Any]:
    """The root node of `statement`'s plan under EXPLAIN ANALYZE, in a transaction rolled
    back (an UPDATE changes nothing); sequential scans priced out unless `seqscan`."""
    cur.execute("BEGIN")
    if not seqscan:
        cur.execute("SET LOCAL enable_seqscan = off")
    cur.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + statement)
    plan = cur.fetchone()[0]
    cur.execute("ROLLBACK")
    if isinstance(plan, str):
        plan = json.loads(plan)
    return dict(plan[0]["Plan"])


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of a plan, the root first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)
