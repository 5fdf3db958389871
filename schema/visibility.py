"""Waiting for a row a Kafka record names to become visible.

Debezium streams a transaction once its commit record is flushed to the WAL, and
Postgres shows the transaction to other sessions only once its writer leaves the
process array: a moment later, or, with a synchronous standby, once the standby has
confirmed the commit. A writer descheduled in between (seen at load average 5 on 2
cores: an honest deposit judged 60 ms after its 200, its row not yet visible), or a
standby gone (every commit waits until pg_auto_failover drops to asynchronous, ~20 s:
seen in a chaos run, a genuine deposit and a settlement dead-lettered), lets the record
reach the ledger before its row. So a refusal that rests on a row not being there (or
not yet in its new state) is looked at again after each of `waits`: first as soon as the
transactions running at the first look have ended (polled, at most the first short
pause: a commit waiting for its standby's flush ends within milliseconds, and the whole
batch waits with it), then after the other short pauses, then once every transaction
that was running at the first look has ended (those include the record's writer, if it
exists), within WRITERS_WAIT_S. Only records that fail the check pay; under READ
COMMITTED each new statement sees what has committed since.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from paystream.schema.db import Cursor

SHORT_PAUSES_S = (0.02, 0.1, 0.3, 0.6, 1.0)
# How often the first wait asks whether the writers running at the first look are done.
FIRST_POLL_S = 0.002
# Beyond pg_auto_failover's 20 s before it stops waiting for a standby that is gone
# (node_considered_unhealthy_timeout; 20.2-20.7 s measured), and under the consumers'
# max.poll.interval.ms (60 s, the tests' 30 s): the ledger judges on its poll thread.
# The price: a record with no row at all, met while an unrelated transaction runs long
# (an index built CONCURRENTLY), holds its batch this long before its dead letter.
WRITERS_WAIT_S = 25.0


# At most this many transaction ids past the snapshot's xmax are looked at (those
# begun since the last one ended): far more than run at once here.
NEWER_IDS_MAX = 10_000


def running(cur: Cursor) -> list[str]:
    """The transaction ids that may be in progress now, but the caller's own: the
    snapshot lists those below its xmax; a writer with a newer id (a committed one
    waiting for its standby is still "running" and may be past xmax) is found between
    xmax and the caller's own id, which this assigns (the ledger writes anyway)."""
    # One snapshot for both: xip and xmax read from two could miss a writer between
    # the first xmax and the second.
    cur.execute("SELECT array(SELECT pg_snapshot_xip(s))::text[], pg_snapshot_xmax(s)::text,"
                " pg_current_xact_id()::text FROM pg_current_snapshot() AS s")
    row = cur.fetchone()
    assert row is not None  # one row, always
    ids, xmax, own = list(row[0]), int(row[1]), int(row[2])
    newer = range(max(xmax, own - NEWER_IDS_MAX), own)
    return [x for x in ids if x != str(own)] + [str(x) for x in newer]


def still_running(cur: Cursor, xids: list[str]) -> list[str]:
    """Those of `xids` still in progress (a committed writer waiting for its synchronous
    standby is: it has not left the process array)."""
    if not xids:
        return []
    cur.execute("SELECT x::text FROM unnest(%s::xid8[]) AS x"
                " WHERE pg_xact_status(x) = 'in progress'", (xids,))
    return [row[0] for row in cur.fetchall()]


def waits(cur: Cursor, writers_wait_s: float = WRITERS_WAIT_S) -> Iterator[None]:
    """Yields after each wait: look again after each, stop when what was missing is
    there. The transactions running at the first call are the ones waited for last."""
    writers = running(cur)
    pending, deadline = writers, time.monotonic() + SHORT_PAUSES_S[0]
    while pending and time.monotonic() < deadline:
        time.sleep(FIRST_POLL_S)
        pending = still_running(cur, pending)
    yield
    for pause in SHORT_PAUSES_S[1:]:
        time.sleep(pause)
        yield
    writers = still_running(cur, writers)
    if not writers:
        return
    deadline = time.monotonic() + writers_wait_s
    while writers and time.monotonic() < deadline:
        time.sleep(0.1)
        writers = still_running(cur, writers)
    yield
