"""The record of what operators did through the console (operator_actions, migration
0029): written in the action's own transaction when it is done (so the record and the
effect commit together), in a transaction of its own when it was refused."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from paystream.schema.db import Cursor

PAGE = 100


@dataclass(frozen=True)
class Action:
    id: int
    at: datetime
    actor: str
    action: str
    target: str
    result: str
    detail: str


def record(cur: Cursor, actor: str, action: str, target: str, result: str,
           detail: str = "") -> None:
    """One action; `result` 'done' or 'refused', `detail` what it did or why not."""
    cur.execute("INSERT INTO operator_actions (actor, action, target, result, detail)"
                " VALUES (%s, %s, %s, %s, %s)",
                (actor[:200], action[:100], target[:500], result, detail[:2000]))


def recent(cur: Cursor, before_id: int | None = None, limit: int = PAGE) -> list[Action]:
    """Newest first, a page below `before_id`."""
    cur.execute("SELECT id, at, actor, action, target, result, detail FROM operator_actions"
                " WHERE (%s::bigint IS NULL OR id < %s::bigint) ORDER BY id DESC LIMIT %s",
                (before_id, before_id, limit))
    return [Action(*row) for row in cur.fetchall()]


def last_of(cur: Cursor, action: str) -> Action | None:
    """The newest record of `action` (the last reconcile run from the console)."""
    cur.execute("SELECT id, at, actor, action, target, result, detail FROM operator_actions"
                " WHERE action = %s ORDER BY id DESC LIMIT 1", (action,))
    row = cur.fetchone()
    return None if row is None else Action(*row)
