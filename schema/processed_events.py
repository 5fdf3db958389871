"""processed_events: what each event did in the ledger, one row per event, written once.

The ledger's idempotency record. A row's key is schema.idempotency.idempotency_key of
the event's (event_id, event_type); its outcome is what the event did. This is the only
module with SQL that writes the table; each function says what it guarantees:

  record(cur, rows)            each key's outcome, inserted once, never overwritten:
                               the claim (all or nothing; the keys already taken)
  settle(cur, keys, ...)       a waiting outcome becomes final, once
  partitions(cur, ...)         each day's partition made ahead; past the window, dropped
                               whole unless a claim in it still waits
  purge_final(cur, ...)        old final rows of the legacy and default partitions go;
                               waiting rows stay, whatever their age
  count_final(cur, cutoff)     what purge_final would delete
  outcome_of(cur, id, type)    one event's outcome (the DLQ replay's refusal)

An outcome is FINAL or WAITING. A final outcome never changes (TigerBeetle's rule: a
result is final for its id; a retry cannot turn a rejection into a success). A waiting
one is the state of an event in progress: a chain deposit held until its block is final
(pending_finality), a credit before finality (credited). The settlement that decides the
deposit moves it to a final outcome, once (settle).

Each claim carries its event's day (`event_day`, migration 0044: OutcomeRow), the key the
table is partitioned by (0047): a partition per day, made ahead and dropped whole once
its day is past the window and none of its claims waits (partitions). A claim with no
day (written before 0044) is in the legacy partition with every day before 0047; one of
a day with no partition any more is in the default partition; both are forgotten by
rows (purge_final).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date, datetime
from enum import StrEnum

import psycopg2.errors

from paystream.schema.db import Cursor
from paystream.schema.idempotency import idempotency_key
from paystream.schema.pgcopy import copy_rows, copy_text


class Outcome(StrEnum):
    """A processed event's outcome as stored (processed_events' CHECK constraint)."""

    APPLIED = "applied"
    INSUFFICIENT_FUNDS = "insufficient_funds"
    PENDING_FINALITY = "pending_finality"  # a chain deposit held in `pending`
    REORGED = "reorged"  # a pending chain deposit released, never credited
    CREDITED = "credited"  # deposit_credited: credited, its deposit not final yet
    REVERSED = "reversed"  # a credited chain deposit whose credit was reversed
    SHORTFALL = "shortfall"  # a reversal available could not fully cover
    ACCOUNT_FLAGGED = "account_flagged"  # a debit refused: the user owes a shortfall
    HOLD_NOT_OPEN = "hold_not_open"  # closing a hold that is not open (or not theirs)
    EXCEEDS_HOLD = "exceeds_hold"  # settling more than the hold's amount or fee
    INVALID_REVERSAL = "invalid_reversal"  # reversing what it may not reverse
    EXCEEDS_ORIGINAL = "exceeds_original"  # reversing more than is left of the original
    # The event's user does not exist: decided from the books like insufficient_funds
    # (a final rejection, not a dead letter: the record is what the outbox stored).
    UNKNOWN_USER = "unknown_user"

    @property
    def is_rejection(self) -> bool:
        """Final, and no money moved: the event's status becomes `rejected`."""
        return self in REJECTIONS


# Both lists are written out (an allow-list each): a new outcome must be placed in one.
WAITING_OUTCOMES: tuple[str, ...] = (Outcome.PENDING_FINALITY.value, Outcome.CREDITED.value)
FINAL_OUTCOMES: tuple[str, ...] = (
    Outcome.APPLIED.value, Outcome.INSUFFICIENT_FUNDS.value, Outcome.REORGED.value,
    Outcome.REVERSED.value, Outcome.SHORTFALL.value, Outcome.ACCOUNT_FLAGGED.value,
    Outcome.HOLD_NOT_OPEN.value, Outcome.EXCEEDS_HOLD.value, Outcome.INVALID_REVERSAL.value,
    Outcome.EXCEEDS_ORIGINAL.value, Outcome.UNKNOWN_USER.value)
REJECTIONS = frozenset({Outcome.INSUFFICIENT_FUNDS, Outcome.ACCOUNT_FLAGGED,
                        Outcome.HOLD_NOT_OPEN, Outcome.EXCEEDS_HOLD,
                        Outcome.INVALID_REVERSAL, Outcome.EXCEEDS_ORIGINAL,
                        Outcome.UNKNOWN_USER})

# (idempotency key, event id, event type, outcome, the event's day: the UTC date its
# stored row was received on, or its deposit recorded on for a settlement; None when
# the caller has none). The day is what the table is to be partitioned by (migration
# 0044): fixed per event, so every claim of one event would meet in one partition.
OutcomeRow = tuple[str, str, str, Outcome, date | None]
_SAVEPOINT = "processed_events_record"
_COPY_NULL = "\\N"  # COPY's text format for SQL NULL


def record(cur: Cursor, rows: Sequence[OutcomeRow]) -> set[str]:
    """Insert each key's outcome, all or nothing, in the caller's transaction; return
    the keys that already had one (then nothing of this call stays written).

    This INSERT is the claim: processed_events' key constraint (processed_events_key_once,
    an exclusion constraint over a hash index: migration 0020 says why not a B-tree) lets
    one transaction only commit an outcome per event, and an existing row is never
    overwritten. A key taken
    by a transaction still open makes this call wait for it, then counts as taken if it
    committed. Rows go in key order, so two claimers of overlapping keys wait on each
    other instead of deadlocking. The all-or-nothing is a savepoint: rows inserted
    before a taken key was found are rolled back to it (never committed, never seen).

    Many rows go by COPY straight into the table, the cheapest insert Postgres has (no
    speculative insertion, no staging table, nothing sent back): a taken key makes it
    fail with an exclusion violation, which only a redelivery causes; then, back at the
    savepoint, the ON CONFLICT statement names the taken keys.
    """
    if not rows:
        return set()
    if len(rows) == 1:
        # Inserted or not: nothing to undo, so no savepoint (one round trip).
        return _insert_missing(cur, rows)
    ordered = sorted(rows, key=lambda row: row[0])
    cur.execute(f"SAVEPOINT {_SAVEPOINT}")
    try:
        copy_rows(cur, "COPY processed_events (idempotency_key, event_id, event_type, outcome,"
                       " event_day) FROM STDIN",
                  (f"{key}\t{copy_text(event_id)}\t{copy_text(event_type)}\t{outcome.value}"
                   f"\t{_COPY_NULL if day is None else day.isoformat()}\n"
                   for key, event_id, event_type, outcome, day in ordered))
    except psycopg2.errors.ExclusionViolation:
        cur.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
        taken = _insert_missing(cur, ordered)
        cur.execute((f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}; " if taken else "")
                    + f"RELEASE SAVEPOINT {_SAVEPOINT}")
        return taken
    cur.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    return set()


def _insert_missing(cur: Cursor, rows: Sequence[OutcomeRow]) -> set[str]:
    """INSERT ... ON CONFLICT DO NOTHING of `rows` in key order; the keys it did not
    insert (taken)."""
    # No arbiter named: on the table partitioned by day the key constraint is each
    # partition's own, and DO NOTHING without a target is arbitrated by every one.
    cur.execute(
        "INSERT INTO processed_events (idempotency_key, event_id, event_type, outcome,"
        " event_day) SELECT k, e, t, o, d FROM unnest(%s::text[], %s::text[], %s::text[],"
        " %s::text[], %s::date[]) AS x(k, e, t, o, d) ORDER BY k"
        " ON CONFLICT DO NOTHING RETURNING idempotency_key",
        ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
         [r[3].value for r in rows], [r[4] for r in rows]))
    inserted = {row[0] for row in cur.fetchall()}
    return {r[0] for r in rows} - inserted


def settle(cur: Cursor, keys: Iterable[str], waiting: Outcome, final: Outcome) -> int:
    """Move the outcome of `keys` from `waiting` to `final`; return how many moved.

    Only rows still at `waiting` change, so a final outcome is never rewritten and a
    replayed settlement moves nothing."""
    if waiting.value not in WAITING_OUTCOMES or final.value not in FINAL_OUTCOMES:
        raise ValueError(f"an outcome moves from waiting to final, not {waiting} -> {final}")
    wanted = sorted(set(keys))
    if not wanted:
        return 0
    cur.execute("UPDATE processed_events SET outcome = %s"
                " WHERE idempotency_key = ANY(%s::text[]) AND outcome = %s",
                (final.value, _key_array(wanted), waiting.value))
    return int(cur.rowcount)


def outcome_of(cur: Cursor, event_id: str, event_type: str) -> str | None:
    """The recorded outcome of one event, or None (never processed, or purged)."""
    cur.execute("SELECT outcome FROM processed_events WHERE idempotency_key = %s",
                (idempotency_key(event_id, event_type),))
    row = cur.fetchone()
    return None if row is None else str(row[0])


def partitions(cur: Cursor, ahead_days: int, keep_days: float | None
               ) -> tuple[int, int, int, int]:
    """The table owner's maintenance (migration 0047, processed_events_partitions): make
    each day's partition from today to `ahead_days` ahead; drop each whose last instant is
    older than `keep_days` (None: none) unless one of its claims waits. Returns (created,
    dropped, kept because a claim waits, skipped because a lock was not granted in 1 s or
    the day's claims are in the default partition already)."""
    cur.execute("SELECT created, dropped, kept, skipped"
                " FROM processed_events_partitions(%s, %s)", (ahead_days, keep_days))
    row = cur.fetchone()
    assert row is not None  # the function returns one row
    created, dropped, kept, skipped = (int(v) for v in row)
    return created, dropped, kept, skipped


def expired_partitions(cur: Cursor, keep_days: float) -> int:
    """How many days' partitions are past `keep_days`: what `partitions` would drop (or
    keep, if a claim in it waits)."""
    cur.execute(_DAY_PARTITIONS_ENDING_BY, (keep_days * 86400,))
    row = cur.fetchone()
    return 0 if row is None else int(row[0])


# The days' partitions (a bound "FOR VALUES FROM ('<day>') TO ('<next day>')": not the
# legacy one, FROM (MINVALUE), nor the default) whose last instant is past a cutoff.
_DAY_PARTITIONS_ENDING_BY = r"""
SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'processed_events'::regclass
   AND pg_get_expr(c.relpartbound, c.oid) ~ '^FOR VALUES FROM \(''[0-9-]+'''
   AND (substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([0-9-]+)''\)')::date)
       ::timestamp AT TIME ZONE 'UTC' <= now() - make_interval(secs => %s)"""

# The partitions whose claims are forgotten by rows: the legacy one (every claim made
# before 0047; it empties as they expire) and the default one. Named, not read through
# the table: a day's partition goes whole (partitions), never row by row.
_BY_ROWS = ("processed_events_legacy", "processed_events_default")


def _by_rows(cur: Cursor) -> list[str]:
    cur.execute("SELECT to_regclass(t)::text FROM unnest(%s::text[]) AS t", (list(_BY_ROWS),))
    return [row[0] for row in cur.fetchall() if row[0] is not None]


def purge_final(cur: Cursor, cutoff: datetime, limit: int) -> int:
    """Delete up to `limit` rows of the legacy and default partitions with a final
    outcome processed before `cutoff`, oldest first in each; return how many. Waiting
    outcomes, and any outcome not in FINAL_OUTCOMES, are never deleted. SKIP LOCKED: a
    row a ledger transaction holds is left for the next call instead of making the
    caller wait on payments."""
    deleted = 0
    for table in _by_rows(cur):
        if deleted >= limit:
            break
        # `table` is one of _BY_ROWS, as Postgres spells it back.
        cur.execute(
            f"WITH batch AS (SELECT idempotency_key FROM {table}"
            "  WHERE processed_at < %(cutoff)s AND outcome = ANY(%(final)s)"
            "  ORDER BY processed_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
            f" DELETE FROM {table} AS p USING batch"
            " WHERE p.idempotency_key = batch.idempotency_key",
            {"cutoff": cutoff, "final": list(FINAL_OUTCOMES), "limit": limit - deleted})
        deleted += max(int(cur.rowcount), 0)
    return deleted


def count_final(cur: Cursor, cutoff: datetime) -> int:
    """How many rows purge_final would delete with this cutoff (no limit)."""
    total = 0
    for table in _by_rows(cur):
        cur.execute(f"SELECT count(*) FROM {table}"
                    " WHERE processed_at < %s AND outcome = ANY(%s)",
                    (cutoff, list(FINAL_OUTCOMES)))
        row = cur.fetchone()
        total += 0 if row is None else int(row[0])
    return total


def _key_array(keys: Sequence[str]) -> str:
    # One text-array literal instead of psycopg2's ARRAY[...] of 2,000 quoted strings:
    # cheaper to build and to parse. A key is 64 hex digits (schema.idempotency, and the
    # table's CHECK constraint), so it needs no quoting; the check below (cheaper than a
    # regex) refuses anything that could: a quote, brace, backslash, space or comma.
    literal = ",".join(keys)
    if (len(literal) != 65 * len(keys) - 1 or literal.count(",") != len(keys) - 1
            or not literal.replace(",", "").isalnum()):
        raise ValueError("idempotency keys are 64 hex digits")
    return "{" + literal + "}"

