-- notification_attempts becomes partitioned by day (0039), so housekeeping forgets a
-- day of attempts by dropping its partition instead of deleting its rows
-- (docs/operations.md#housekeeping). Expand, step 1 of 3: the partition key, stamped by
-- the database (the notifier's started_at is its own clock's), and a bound every
-- existing row is under, so the table can become the first partition (MINVALUE to the
-- bound) without a scan under an exclusive lock (0038 validates, 0039 attaches).
-- The previous release's inserts name no recorded_at: the default stamps them.

-- now() is STABLE: Postgres evaluates it once and stores it as the missing value, no
-- rewrite; the NOT NULL is what lets 0039 attach the table without a scan.
ALTER TABLE notification_attempts
    ADD COLUMN recorded_at TIMESTAMPTZ NOT NULL DEFAULT now();

-- The bound: midnight UTC after tomorrow, so the previous release keeps inserting here
-- for at least a day before 0039 must have run (the runner applies 0037-0039 in one go).
DO $$
BEGIN
    EXECUTE format(
        'ALTER TABLE notification_attempts ADD CONSTRAINT notification_attempts_before_days'
        ' CHECK (recorded_at < %L) NOT VALID',
        date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '2 days');
END
$$;
