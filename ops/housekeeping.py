"""Housekeeping: forget idempotency rows whose outcome is final and older than a TTL.

processed_events grows by one row per event. Past the TTL a redelivery is no longer
plausible (Kafka retention, Debezium and consumer replays all act within hours), and if
one does arrive, the journal's UNIQUE (source_event_id, event_type) still refuses a
second ledger effect: the ledger's batch fails on the journal insert and rolls back its
balance update with it (tests/integration/test_ops_housekeeping.py shows it).

Only final outcomes are deleted. An entry still waiting (`pending_finality`, `credited`)
is the state of an event in progress and is never touched, whatever its age; an outcome this
module does not know is kept too (allow-list, not deny-list).

Rows go in small batches, each one DELETE statement = one short transaction on an
autocommit connection, so the purge never holds many locks or a long snapshot, and it
runs behind a transaction-pooling PgBouncer. The cutoff is fixed when the run starts, so
a run always ends. SKIP LOCKED: a row the ledger is updating right now is left for the
next run instead of making housekeeping wait on payments.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg2.extensions

# Outcomes after which an event's processing can never change (TigerBeetle's rule: a
# result is final for its id). Keep in step with processed_events' CHECK constraint.
# Not here, so kept whatever their age: `pending_finality` (a chain deposit not final,
# credited before finality or not) and `credited` (a deposit_credited whose deposit is
# not final yet: a reorg may still reverse it). The ledger moves both to a final
# outcome when the deposit settles (applied, reorged or reversed).
FINAL_OUTCOMES: tuple[str, ...] = ("applied", "insufficient_funds", "reorged", "reversed",
                                   "shortfall", "account_flagged")
DEFAULT_TTL_DAYS = 14.0
DEFAULT_BATCH_SIZE = 1000

_DELETE_BATCH = """
    WITH batch AS (
        SELECT idempotency_key FROM processed_events
        WHERE processed_at < %(cutoff)s AND outcome = ANY(%(final)s)
        ORDER BY processed_at
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    )
    DELETE FROM processed_events AS p USING batch
    WHERE p.idempotency_key = batch.idempotency_key"""

_COUNT = """
    SELECT count(*) FROM processed_events
    WHERE processed_at < %(cutoff)s AND outcome = ANY(%(final)s)"""


@dataclass(frozen=True)
class PurgeResult:
    deleted: int
    batches: int
    cutoff: datetime
    dry_run: bool = False


def purge_processed_events(conn: psycopg2.extensions.connection, *,
                           ttl_days: float = DEFAULT_TTL_DAYS,
                           batch_size: int = DEFAULT_BATCH_SIZE,
                           pause_s: float = 0.0, max_batches: int | None = None,
                           dry_run: bool = False) -> PurgeResult:
    """Delete final processed_events rows older than `ttl_days`, `batch_size` at a time.

    `conn` must be in autocommit mode: every batch commits on its own.
    """
    if not conn.autocommit:
        raise ValueError("housekeeping needs an autocommit connection (one batch per commit)")
    if ttl_days < 0 or batch_size < 1:
        raise ValueError("ttl_days must be >= 0 and batch_size >= 1")
    with conn.cursor() as cur:
        cur.execute("SELECT now() - make_interval(secs => %s)", (ttl_days * 86400,))
        cutoff = cur.fetchone()[0]
        params: dict[str, Any] = {"cutoff": cutoff, "final": list(FINAL_OUTCOMES),
                                  "limit": batch_size}
        if dry_run:
            cur.execute(_COUNT, params)
            return PurgeResult(int(cur.fetchone()[0]), 0, cutoff, dry_run=True)
        deleted = batches = 0
        while max_batches is None or batches < max_batches:
            cur.execute(_DELETE_BATCH, params)
            if cur.rowcount <= 0:
                break
            deleted += cur.rowcount
            batches += 1
            if cur.rowcount < batch_size:
                break
            if pause_s:
                # Lets replication and autovacuum keep up on a large first purge.
                time.sleep(pause_s)
    return PurgeResult(deleted, batches, cutoff)
