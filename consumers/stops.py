"""consumer_stops: a consumer group stopped by its DLQ limit, until an operator resumes it.

The only module with SQL on the table (migration 0022). A consumer whose DLQ limit
trips commits the part of its batch before the failure that tripped it, leaves the rest
uncommitted and records the stop (`record`); every consumer of the group
stays idle while the row exists (`of_group`, polled about once a second), so a process
restarted by `paystream run` changes nothing. `paystream consume resume GROUP` deletes
it (`remove`); `paystream health` lists them (`all_stops`).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import datetime

from paystream.schema.db import Cursor

DLQ_LIMIT_EXCEEDED = "dlq_limit_exceeded"
_COLUMNS = "group_id, reason, detail, stopped_at, host, pid"


@dataclass(frozen=True)
class Stop:
    group_id: str
    reason: str
    detail: str
    stopped_at: datetime
    host: str
    pid: int

    @property
    def resume_command(self) -> str:
        return resume_command(self.group_id)


def resume_command(group: str) -> str:
    return f"paystream consume resume {group}"


def record(cur: Cursor, group: str, reason: str, detail: str) -> None:
    """Stop `group` (in the caller's transaction); a stop already recorded is kept: its
    cause came first."""
    cur.execute(f"INSERT INTO consumer_stops ({_COLUMNS}) VALUES (%s, %s, %s, now(), %s, %s)"
                " ON CONFLICT (group_id) DO NOTHING",
                (group, reason, detail, socket.gethostname(), os.getpid()))


def of_group(cur: Cursor, group: str) -> Stop | None:
    cur.execute(f"SELECT {_COLUMNS} FROM consumer_stops WHERE group_id = %s", (group,))
    row = cur.fetchone()
    return None if row is None else Stop(*row)


def all_stops(cur: Cursor) -> list[Stop]:
    cur.execute(f"SELECT {_COLUMNS} FROM consumer_stops ORDER BY group_id")
    return [Stop(*row) for row in cur.fetchall()]


def remove(cur: Cursor, group: str) -> Stop | None:
    """Resume `group`: delete its stop; the stop deleted, or None if there was none."""
    cur.execute(f"DELETE FROM consumer_stops WHERE group_id = %s RETURNING {_COLUMNS}",
                (group,))
    row = cur.fetchone()
    return None if row is None else Stop(*row)
