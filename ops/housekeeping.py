"""Housekeeping: forget the idempotency claims of days past their TTL by dropping each
day's partition (migration 0047, maintain_claim_partitions) and the older claims of the
legacy and default partitions by rows, notifications whose deliveries are all final and
older than theirs, and deliveries refused at the door (ingest/refusals.py) not retried
within theirs; keep the daily partitions of notification_attempts and of the claims
created ahead and drop the expired ones whole (migration 0039, maintain_attempt_partitions).

processed_events grows by one row per event. Past the TTL a redelivery is no longer
plausible (Kafka retention, Debezium and consumer replays all act within hours), and if
one does arrive, the ledger finds its effect on record (its journal row, its final
status) and treats it as a duplicate, writing its outcome back as it was; the journal's
UNIQUE (source_event_id, event_type) refuses a second effect whatever happens
(tests/integration/test_ops_housekeeping.py shows both). The TTL counts from the end of
the day its event was received on (the partition's), so a claim is kept at least that
long after its event arrived; one made later for an older day (a DLQ replay) may go
sooner, as such a redelivery already had its chance.

Only final outcomes are deleted (schema.processed_events, the one writer of the table).
An entry still waiting (`pending_finality`, `credited`) is the state of an event in
progress and is never touched, whatever its age: a day's partition holding one is kept
whole; an outcome not listed as final is kept too (allow-list, not deny-list).

Rows go in small batches, each one DELETE statement = one short transaction on an
autocommit connection, so the purge never holds many locks or a long snapshot, and it
runs behind a transaction-pooling PgBouncer. The cutoff is fixed when the run starts, so
a run always ends. SKIP LOCKED: a row the ledger is updating right now is left for the
next run instead of making housekeeping wait on payments.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from paystream.ingest import refusals
from paystream.notify import slots
from paystream.schema import processed_events
from paystream.schema.db import Connection, Cursor

# The outcomes purged: final ones (TigerBeetle's rule: a result is final for its id).
# Kept whatever their age: the waiting `pending_finality` (a chain deposit not final,
# credited before finality or not) and `credited` (a deposit_credited whose deposit is
# not final yet: a reorg may still reverse it); the ledger moves both to a final outcome
# when the deposit settles (applied, reorged or reversed). Both lists live with the
# table (schema.processed_events); the CLI names these in its report.
FINAL_OUTCOMES = processed_events.FINAL_OUTCOMES
DEFAULT_TTL_DAYS = 14.0
# Notifications: a month of delivery history for operators, and well above the
# notifications topic's 7-day retention (see purge_notifications).
DEFAULT_NOTIFICATION_TTL_DAYS = 30.0
# Refused deliveries: a month to answer "why was my webhook refused?"; a provider's
# retries of one refusal keep its row young (last_refused_at).
DEFAULT_REFUSALS_TTL_DAYS = 30.0
DEFAULT_BATCH_SIZE = 1000
# notification_attempts' daily partitions made this far ahead: housekeeping may miss
# two weeks of runs before a day's attempts fall in the default partition (never fail).
DEFAULT_PARTITIONS_AHEAD_DAYS = 14


@dataclass(frozen=True)
class PurgeResult:
    deleted: int
    batches: int
    cutoff: datetime
    dry_run: bool = False


def purge_processed_events(conn: Connection, *,
                           ttl_days: float = DEFAULT_TTL_DAYS,
                           batch_size: int = DEFAULT_BATCH_SIZE,
                           pause_s: float = 0.0, max_batches: int | None = None,
                           dry_run: bool = False) -> PurgeResult:
    """Delete final processed_events rows older than `ttl_days`, `batch_size` at a time.

    `conn` must be in autocommit mode: every batch commits on its own.
    """
    return _purge(conn, processed_events.purge_final, processed_events.count_final,
                  ttl_days, batch_size, pause_s, max_batches, dry_run)


def purge_notifications(conn: Connection, *,
                        ttl_days: float = DEFAULT_NOTIFICATION_TTL_DAYS,
                        batch_size: int = DEFAULT_BATCH_SIZE,
                        pause_s: float = 0.0, max_batches: int | None = None,
                        dry_run: bool = False) -> PurgeResult:
    """Delete notification intents older than `ttl_days` whose every delivery is final
    and that no reminder claim names, with their deliveries and attempts
    (notify.slots.purge_final), `batch_size` intents at a time. The TTL
    must stay above the notifications topic's retention (7 days): an intent read again
    after its purge would be sent again."""
    return _purge(conn, slots.purge_final, slots.count_final,
                  ttl_days, batch_size, pause_s, max_batches, dry_run)


def purge_refusals(conn: Connection, *, ttl_days: float = DEFAULT_REFUSALS_TTL_DAYS,
                   batch_size: int = DEFAULT_BATCH_SIZE, pause_s: float = 0.0,
                   max_batches: int | None = None, dry_run: bool = False) -> PurgeResult:
    """Delete refused deliveries last retried more than `ttl_days` ago, `batch_size` at
    a time (ingest.refusals.purge_older)."""
    return _purge(conn, refusals.purge_older, refusals.count_older,
                  ttl_days, batch_size, pause_s, max_batches, dry_run)


@dataclass(frozen=True)
class PartitionResult:
    created: int
    dropped: int
    deleted: int  # expired rows of the default partition (only if runs were missed)
    skipped: int  # a lock not granted within 1 s, or a day already in the default
    dry_run: bool = False


def maintain_attempt_partitions(conn: Connection, *,
                                ttl_days: float = DEFAULT_NOTIFICATION_TTL_DAYS,
                                ahead_days: int = DEFAULT_PARTITIONS_AHEAD_DAYS,
                                dry_run: bool = False) -> PartitionResult:
    """notification_attempts' daily partitions: create those from today to `ahead_days`
    ahead, drop each whose last instant is more than `ttl_days` old (a day of attempts
    in one DROP TABLE, whatever the table's size), in the table owner's function
    (migration 0039). A dry run counts the partitions that would go."""
    if ttl_days < 0 or ahead_days < 0:
        raise ValueError("ttl_days and ahead_days must be >= 0")
    with conn.cursor() as cur:
        if dry_run:
            cur.execute(
                "SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
                " WHERE i.inhparent = 'notification_attempts'::regclass"
                "  AND substring(pg_get_expr(c.relpartbound, c.oid)"
                "   FROM 'TO \\(''([^'']+)''\\)')::timestamptz"
                "   <= now() - make_interval(secs => %s)", (ttl_days * 86400,))
            row = cur.fetchone()
            assert row is not None  # a count returns one row
            return PartitionResult(0, int(row[0]), 0, 0, dry_run=True)
        cur.execute("SELECT created, dropped, deleted, skipped"
                    " FROM notification_attempts_partitions(%s, %s)", (ahead_days, ttl_days))
        row = cur.fetchone()
        assert row is not None  # the function returns one row
        created, dropped, deleted, skipped = (int(v) for v in row)
        return PartitionResult(created, dropped, deleted, skipped)


@dataclass(frozen=True)
class ClaimPartitionResult:
    created: int
    dropped: int
    kept: int  # past the TTL, kept whole because one of its claims still waits
    skipped: int  # a lock not granted within 1 s, or a day already in the default
    dry_run: bool = False


def maintain_claim_partitions(conn: Connection, *, ttl_days: float = DEFAULT_TTL_DAYS,
                              ahead_days: int = DEFAULT_PARTITIONS_AHEAD_DAYS,
                              dry_run: bool = False) -> ClaimPartitionResult:
    """processed_events' daily partitions: create those from today to `ahead_days`
    ahead, drop each whose last instant is more than `ttl_days` old and none of whose
    claims waits (a day of claims in one DROP TABLE, whatever the table's size). A dry
    run counts the partitions past the TTL (dropped, or kept if a claim waits)."""
    if ttl_days < 0 or ahead_days < 0:
        raise ValueError("ttl_days and ahead_days must be >= 0")
    with conn.cursor() as cur:
        if dry_run:
            return ClaimPartitionResult(0, processed_events.expired_partitions(cur, ttl_days),
                                        0, 0, dry_run=True)
        return ClaimPartitionResult(*processed_events.partitions(cur, ahead_days, ttl_days))


def _purge(conn: Connection, purge: Callable[[Cursor, datetime, int], int],
           count: Callable[[Cursor, datetime], int], ttl_days: float, batch_size: int,
           pause_s: float, max_batches: int | None, dry_run: bool) -> PurgeResult:
    if not conn.autocommit:
        raise ValueError("housekeeping needs an autocommit connection (one batch per commit)")
    if ttl_days < 0 or batch_size < 1:
        raise ValueError("ttl_days must be >= 0 and batch_size >= 1")
    with conn.cursor() as cur:
        cur.execute("SELECT now() - make_interval(secs => %s)", (ttl_days * 86400,))
        row = cur.fetchone()
        assert row is not None  # a SELECT of one expression returns one row
        cutoff: datetime = row[0]
        if dry_run:
            return PurgeResult(count(cur, cutoff), 0, cutoff, dry_run=True)
        deleted = batches = 0
        while max_batches is None or batches < max_batches:
            done = purge(cur, cutoff, batch_size)
            if done <= 0:
                break
            deleted += done
            batches += 1
            if done < batch_size:
                break
            if pause_s:
                # Lets replication and autovacuum keep up on a large first purge.
                time.sleep(pause_s)
    return PurgeResult(deleted, batches, cutoff)
