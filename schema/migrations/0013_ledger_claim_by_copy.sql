-- The ledger's claim COPYs straight into processed_events (schema/processed_events.py):
-- it stages nothing any more, so it loses the TEMPORARY right 0007 gave it for that.
DO $$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM paystream_ledger', current_database());
END
$$;
