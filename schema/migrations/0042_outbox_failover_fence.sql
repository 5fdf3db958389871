-- The outbox's fence for a failover (docs/operations.md#cdc-across-a-failover). Every
-- statement that inserts into the outbox first takes a shared advisory lock; when the
-- failover follower holds that lock exclusively (while it creates the new primary's
-- replication slot and publishes again what the old slot may have lost), the insert is
-- refused at once with serialization_failure (40001, retryable: the ingest answers 503,
-- the consumers and the watcher try again) instead of committing a message the new slot
-- would decode ahead of the republished ones: a user's later event overtaking an
-- earlier one. Refused, not queued: a writer queued behind the fence would already hold
-- a transaction id, which the slot's creation waits for.
--
-- The key is schema.outbox.FENCE_KEY. The follower's own inserts pass: a backend's
-- requests never conflict with the locks it holds.
--
-- Online: CREATE TRIGGER takes a short SHARE ROW EXCLUSIVE lock on the (empty) outbox.
CREATE FUNCTION outbox_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock_shared(7401766021) THEN
        RAISE EXCEPTION 'the outbox is fenced: a database failover is being followed'
            USING ERRCODE = 'serialization_failure',
                  HINT = 'retry: the fence lifts once the new primary publishes again';
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_fence BEFORE INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_fence();
