-- Expand, step 3 of 3: processed_events becomes a table partitioned by its event's day,
-- COALESCE(event_day, '-infinity') (0044 writes the day: the UTC date the event's stored
-- row was received on, or its deposit recorded on for a settlement). The table as it
-- was (0045-0046) is attached as `processed_events_legacy`, the days before 0045's bound
-- and every claim with no day. The name, the columns and the rights stay: the previous
-- release's ledger claims, settles and reads by the name, which now resolves to the
-- partitioned table. The swap holds an exclusive lock for the catalog changes only.
--
-- Why (docs/operations.md#housekeeping, docs/benchmarks.md "Growth"): a claim is one row
-- per event, kept 14 days; housekeeping deleted expired claims row by row (3.7 s a day's
-- worth at 10 M). It now drops a day's partition whole (processed_events_partitions).
--
-- One claim per event, across partitions: Postgres 15 has no key constraint on a
-- partitioned table, so each partition has its own hash exclusion on the key, as the
-- table had (0020). Every claim of one event carries the same day (its stored row's, or
-- its deposit's), so the claims of one event meet in one partition and a second one
-- conflicts there, as before. A claim of a day whose partition was dropped lands in the
-- default partition: by then its event's first claim is gone too (the window,
-- ops/housekeeping.py says why that is safe), and the journal's UNIQUE refuses a second
-- effect whatever happens.

CREATE TABLE processed_events_by_day (
    idempotency_key TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    processed_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    event_day       DATE,
    -- The legacy table's CHECKs, by their names (ATTACH matches them by name).
    CONSTRAINT processed_events_idempotency_key_check
        CHECK (octet_length(idempotency_key) = 64 AND idempotency_key ~ '^[0-9a-f]+$'),
    CONSTRAINT processed_events_outcome_check
        CHECK (outcome IN ('applied', 'insufficient_funds', 'pending_finality', 'reorged',
                           'credited', 'reversed', 'shortfall', 'account_flagged',
                           'hold_not_open', 'exceeds_hold', 'invalid_reversal',
                           'exceeds_original', 'unknown_user'))
) PARTITION BY RANGE ((COALESCE(event_day, '-infinity'::date)));

-- The table is new and empty (and a partitioned table's index cannot be built
-- CONCURRENTLY); attaching the legacy table adopts its equal index, no build, and every
-- partition made later gets one. The failover's republish (notify/republish.py) reads
-- the last minutes' claims by it.
CREATE INDEX processed_events_by_processed_at ON processed_events_by_day (processed_at);

-- The previous release keeps the name (it resolves to the partitioned table after the
-- commit); only the old table object is renamed, to become a partition.
-- squawk-ignore renaming-table
ALTER TABLE processed_events RENAME TO processed_events_legacy;
-- squawk-ignore renaming-table
ALTER TABLE processed_events_by_day RENAME TO processed_events;

DO $$
DECLARE
    bound DATE;
BEGIN
    -- 0045's bound, validated by 0046: ATTACH trusts it instead of scanning the table.
    SELECT substring(pg_get_constraintdef(oid) FROM '< ''([0-9-]+)''::date')::date
      INTO STRICT bound
      FROM pg_constraint
     WHERE conname = 'processed_events_before_days'
       AND conrelid = 'processed_events_legacy'::regclass;
    EXECUTE format('ALTER TABLE processed_events ATTACH PARTITION processed_events_legacy'
                   ' FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END
$$;

-- Claims of a day with no partition: one whose partition housekeeping dropped (a DLQ
-- replay, a settlement of an old deposit), or one of a day housekeeping did not make
-- ahead because it missed two weeks of runs. Kept small: its expired final claims are
-- deleted by rows (schema/processed_events.py purge_final), by its processed_at index.
CREATE TABLE processed_events_default PARTITION OF processed_events DEFAULT;
ALTER TABLE processed_events_default ADD CONSTRAINT processed_events_default_key_once
    EXCLUDE USING hash (idempotency_key WITH =);

-- Housekeeping's partition maintenance (ops/housekeeping.py maintain_claim_partitions),
-- run as the operator. Creates the daily partitions from `behind_days` before today to
-- `ahead_days` ahead (housekeeping makes today's and later; behind, a day no partition
-- covers, for a database restored or filled with older claims), each with its key
-- exclusion and an index of its waiting claims. Drops each day's
-- partition whose last instant is older than `keep_days`, unless one of its claims still
-- waits (`pending_finality`, `credited`: an event in progress): it is kept, and counted.
-- A lock not granted within 1 s skips that partition until the next run instead of
-- making the ledger's claims queue behind it. `keep_days` NULL drops nothing.
-- The parent is locked before a day is checked and dropped, so no claim lands in it in
-- between, and in the order the ledger takes (the parent, then a partition).
-- SECURITY DEFINER: creating and dropping a partition needs the table's owner.
CREATE FUNCTION processed_events_partitions(
        ahead_days INTEGER, keep_days DOUBLE PRECISION, behind_days INTEGER DEFAULT 0,
        OUT created INTEGER, OUT dropped INTEGER, OUT kept INTEGER, OUT skipped INTEGER)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    today DATE := (now() AT TIME ZONE 'UTC')::date;
    cutoff TIMESTAMPTZ := now() - make_interval(secs => keep_days * 86400);
    day DATE;
    name TEXT;
    waits BOOLEAN;
    part RECORD;
BEGIN
    created := 0; dropped := 0; kept := 0; skipped := 0;
    IF ahead_days NOT BETWEEN 0 AND 366 OR behind_days NOT BETWEEN 0 AND 3660
       OR keep_days < 0 THEN
        RAISE EXCEPTION 'ahead_days must be 0..366, behind_days 0..3660, keep_days >= 0';
    END IF;
    FOR day IN SELECT d::date FROM generate_series(today - behind_days, today + ahead_days,
                                                   interval '1 day') d
    LOOP
        -- A day some partition covers already: its own, or the legacy one's range.
        -- Bounds read "FOR VALUES FROM (MINVALUE) TO ('2026-12-10')"; the default's is
        -- DEFAULT (no FROM, no TO: never counted).
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid,
                   LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
             WHERE i.inhparent = 'processed_events'::regclass
               AND coalesce(substring(b.bound FROM 'FROM \(''([0-9-]+)''\)')::date,
                            '-infinity') <= day
               AND substring(b.bound FROM 'TO \(''([0-9-]+)''\)')::date > day);
        name := 'processed_events_' || to_char(day, 'YYYYMMDD');
        BEGIN
            EXECUTE format('CREATE TABLE %I PARTITION OF processed_events'
                           ' FOR VALUES FROM (%L) TO (%L)', name, day, day + 1);
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I'
                           ' EXCLUDE USING hash (idempotency_key WITH =)',
                           name, name || '_key_once');
            EXECUTE format('CREATE INDEX %I ON %I (outcome)'
                           ' WHERE outcome IN (''pending_finality'', ''credited'')',
                           name || '_waiting', name);
            created := created + 1;
        EXCEPTION
            -- The default partition already holds claims of that day (they stay there),
            -- or the lock was not granted: the next run tries again.
            WHEN check_violation OR lock_not_available THEN skipped := skipped + 1;
        END;
    END LOOP;
    FOR part IN
        SELECT c.oid::regclass AS name
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'processed_events'::regclass
           -- a day's partition (not the legacy one, from MINVALUE; not the default)
           AND pg_get_expr(c.relpartbound, c.oid) ~ '^FOR VALUES FROM \(''[0-9-]+'''
           AND (substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([0-9-]+)''\)')
                ::date)::timestamp AT TIME ZONE 'UTC' <= cutoff
         ORDER BY c.relname
    LOOP
        BEGIN
            LOCK TABLE processed_events IN ACCESS EXCLUSIVE MODE;
            -- By the partition's index of its waiting claims: a probe, not a scan.
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s'
                           ' WHERE outcome IN (''pending_finality'', ''credited''))',
                           part.name) INTO waits;
            IF waits THEN
                kept := kept + 1;
            ELSE
                EXECUTE format('DROP TABLE %s', part.name);
                dropped := dropped + 1;
            END IF;
        EXCEPTION WHEN lock_not_available THEN skipped := skipped + 1;
        END;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION processed_events_partitions(INTEGER, DOUBLE PRECISION, INTEGER)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION processed_events_partitions(INTEGER, DOUBLE PRECISION, INTEGER)
    TO paystream_ops;

-- The rights the table had (0007, 0010), on the new table. The operator's purge deletes
-- the expired claims of the default and legacy partitions by their names: a partition
-- named directly checks its own rights, which the legacy table kept.
GRANT SELECT, INSERT ON processed_events TO paystream_ledger;
GRANT UPDATE (outcome) ON processed_events TO paystream_ledger;
GRANT SELECT, DELETE ON processed_events, processed_events_default TO paystream_ops;
-- The row lock of the purge (SELECT ... FOR UPDATE SKIP LOCKED), as 0007 says.
GRANT UPDATE (processed_at) ON processed_events, processed_events_default TO paystream_ops;
GRANT SELECT ON processed_events TO paystream_api;

-- Today and the next 14 days, so no claim waits for the first housekeeping run (the
-- days before 0045's bound are the legacy partition's).
SELECT processed_events_partitions(14, NULL);
