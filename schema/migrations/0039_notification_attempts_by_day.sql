-- Expand, step 3 of 3: notification_attempts becomes a table partitioned by day of
-- recorded_at (UTC), with the table as it was (0037-0038) attached as its first
-- partition, `notification_attempts_legacy` (MINVALUE to 0037's bound). The name, the
-- columns and the rights stay: the previous release's notifier inserts, its operator
-- commands read and its housekeeping deletes by the name, and the name now resolves to
-- the partitioned table (tests/integration/test_previous_release.py). The swap holds an
-- exclusive lock for the catalog changes only: no scan, no copy.
--
-- Why this table (docs/operations.md#housekeeping, docs/benchmarks.md "Growth"): it is
-- append-only, the largest of the notification tables (one row per attempt, several per
-- delivery to a failing endpoint), and expires by age; housekeeping now forgets a day of
-- it with one DROP TABLE (notification_attempts_partitions below) instead of deleting
-- its rows one by one. Nothing references it. There is no primary key on the parent: a
-- key would have to include recorded_at, and ids come from one sequence.

-- Ids from a sequence of the parent's own: the legacy identity's dies with its partition.
CREATE SEQUENCE notification_attempts_row_id_seq AS BIGINT;

-- The legacy table's columns and types exactly (INTEGER too): ATTACH requires them.
CREATE TABLE notification_attempts_by_day (
    id           BIGINT NOT NULL DEFAULT nextval('notification_attempts_row_id_seq'),
    intent_id    TEXT NOT NULL,
    endpoint_id  TEXT NOT NULL,
    -- squawk-ignore prefer-bigint-over-int
    attempt      INTEGER NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    latency_s    DOUBLE PRECISION NOT NULL,
    -- squawk-ignore prefer-bigint-over-int
    status_code  INTEGER,
    error        TEXT,
    response_head TEXT,  -- 0035: the answer's first bytes, for the merchant's log
    recorded_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT notification_attempts_of_delivery FOREIGN KEY (intent_id, endpoint_id)
        REFERENCES notification_deliveries (intent_id, endpoint_id)
) PARTITION BY RANGE (recorded_at);
ALTER SEQUENCE notification_attempts_row_id_seq OWNED BY notification_attempts_by_day.id;

-- The table is new and empty (and a partitioned table's index cannot be built
-- CONCURRENTLY); attaching the legacy table adopts its equal index, no build.
CREATE INDEX notification_attempts_by_delivery
    ON notification_attempts_by_day (intent_id, endpoint_id);

-- Rows of a day with no partition yet land here rather than fail the notifier's insert:
-- housekeeping creates partitions two weeks ahead, so this stays empty unless it has
-- not run for that long (then its expired rows are deleted row by row).
CREATE TABLE notification_attempts_default PARTITION OF notification_attempts_by_day DEFAULT;

-- The previous release keeps the name (it resolves to the partitioned table after the
-- commit); only the old table object is renamed, to become a partition.
-- squawk-ignore renaming-table
ALTER TABLE notification_attempts RENAME TO notification_attempts_legacy;
-- The new table takes the name the previous release and this one use.
-- squawk-ignore renaming-table
ALTER TABLE notification_attempts_by_day RENAME TO notification_attempts;

DO $$
DECLARE
    bound TIMESTAMPTZ;
BEGIN
    -- 0037's bound, validated by 0038: ATTACH trusts it instead of scanning the table.
    SELECT substring(pg_get_constraintdef(oid) FROM '''([^'']+)''')::timestamptz
      INTO STRICT bound
      FROM pg_constraint WHERE conname = 'notification_attempts_before_days';
    EXECUTE format('ALTER TABLE notification_attempts ATTACH PARTITION'
                   ' notification_attempts_legacy FOR VALUES FROM (MINVALUE) TO (%L)', bound);
    -- Above every id the legacy identity gave, with room for an insert of the previous
    -- release that parsed before the rename and waited on its lock.
    PERFORM setval('notification_attempts_row_id_seq',
                   (SELECT last_value FROM notification_attempts_id_seq) + 100000);
END
$$;

-- Housekeeping's partition maintenance (ops/housekeeping.py maintain_attempt_partitions),
-- run as the operator: creates the daily partitions from today to `ahead_days` ahead,
-- drops every partition whose last instant is older than `keep_days`, and deletes the
-- default partition's expired rows. A lock not granted within 1 s (a reader of the
-- table in the way) skips that partition until the next run instead of making the
-- notifier's inserts queue behind it. `keep_days` NULL drops and deletes nothing.
-- SECURITY DEFINER: creating and dropping a
-- partition needs the table's owner; the function is the only way the operator has.
CREATE FUNCTION notification_attempts_partitions(
        ahead_days INTEGER, keep_days DOUBLE PRECISION,
        OUT created INTEGER, OUT dropped INTEGER, OUT deleted BIGINT, OUT skipped INTEGER)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp
SET lock_timeout = '1s'
AS $$
DECLARE
    today DATE := (now() AT TIME ZONE 'UTC')::date;
    cutoff TIMESTAMPTZ := now() - make_interval(secs => keep_days * 86400);
    covered TIMESTAMPTZ;
    day DATE;
    part RECORD;
BEGIN
    created := 0; dropped := 0; deleted := 0; skipped := 0;
    IF ahead_days < 0 OR ahead_days > 366 OR keep_days < 0 THEN
        RAISE EXCEPTION 'ahead_days must be 0..366 and keep_days >= 0';
    END IF;
    -- Bounds as "FOR VALUES FROM (...) TO ('...')"; the default partition's is DEFAULT.
    SELECT max(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)')
               ::timestamptz)
      INTO covered
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'notification_attempts'::regclass;
    FOR day IN SELECT d::date FROM generate_series(today, today + ahead_days, interval '1 day') d
    LOOP
        CONTINUE WHEN covered IS NOT NULL AND day < covered AT TIME ZONE 'UTC';
        BEGIN
            EXECUTE format('CREATE TABLE %I PARTITION OF notification_attempts'
                           ' FOR VALUES FROM (%L) TO (%L)',
                           'notification_attempts_' || to_char(day, 'YYYYMMDD'),
                           day::timestamp AT TIME ZONE 'UTC',
                           (day + 1)::timestamp AT TIME ZONE 'UTC');
            created := created + 1;
        EXCEPTION
            -- The default partition already holds rows of that day (they stay there), or
            -- the lock was not granted: the next run tries again.
            WHEN check_violation OR lock_not_available THEN skipped := skipped + 1;
        END;
    END LOOP;
    FOR part IN
        SELECT c.oid::regclass AS name
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'notification_attempts'::regclass
           AND substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)')
               ::timestamptz <= cutoff
    LOOP
        BEGIN
            EXECUTE format('DROP TABLE %s', part.name);
            dropped := dropped + 1;
        EXCEPTION WHEN lock_not_available THEN skipped := skipped + 1;
        END;
    END LOOP;
    DELETE FROM notification_attempts_default WHERE recorded_at < cutoff;
    GET DIAGNOSTICS deleted = ROW_COUNT;
END
$$;
REVOKE ALL ON FUNCTION notification_attempts_partitions(INTEGER, DOUBLE PRECISION) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION notification_attempts_partitions(INTEGER, DOUBLE PRECISION)
    TO paystream_ops;

-- The merchants' tenancy (0035), on the new table: the API's role reads the attempts of
-- its merchant's endpoints only (a partition read through it is filtered by these).
CREATE POLICY everyone ON notification_attempts USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON notification_attempts AS RESTRICTIVE TO paystream_api
    USING (api_sees_endpoint(endpoint_id));  -- 0040 inlines the rule
ALTER TABLE notification_attempts ENABLE ROW LEVEL SECURITY;
GRANT SELECT ON notification_attempts TO paystream_api;

-- The rights the table had (0011, 0015), on the new table; inserting draws an id.
GRANT SELECT, INSERT ON notification_attempts TO paystream_notifier;
GRANT USAGE ON SEQUENCE notification_attempts_row_id_seq TO paystream_notifier;
GRANT SELECT, DELETE ON notification_attempts TO paystream_ops;

-- Today and the next 14 days, so no insert waits for the first housekeeping run.
SELECT notification_attempts_partitions(14, NULL);
