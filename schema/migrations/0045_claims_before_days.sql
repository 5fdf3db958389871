-- processed_events (the ledger's claims) becomes partitioned by the UTC day its event
-- was received on (0047; the day is written since 0044). Expand, step 1 of 3: a bound
-- every existing claim is under, so the table can become the partition of the days
-- before it (MINVALUE to the bound) without a scan under an exclusive lock (0046
-- validates, 0047 attaches). A claim written before 0044 has no day: the partition key
-- is COALESCE(event_day, '-infinity'), so it counts as the earliest day of all.
--
-- The bound: midnight UTC after tomorrow, so the previous release (0044's, which writes
-- the day of the events it claims: today's or an earlier one) keeps claiming here for at
-- least a day before 0047 must have run (the runner applies 0045-0047 in one go). The
-- IS NOT NULL is spelled out: ATTACH proves the partition's bound from the CHECK, and it
-- cannot infer that a COALESCE is never NULL.
DO $$
BEGIN
    EXECUTE format(
        'ALTER TABLE processed_events ADD CONSTRAINT processed_events_before_days'
        ' CHECK (COALESCE(event_day, %L::date) IS NOT NULL'
        ' AND COALESCE(event_day, %L::date) < %L::date) NOT VALID',
        '-infinity', '-infinity', (now() AT TIME ZONE 'UTC')::date + 2);
END
$$;
