-- The ledger's claim (schema/processed_events.py) is one key per event, kept by an
-- exclusion constraint over a hash index instead of a B-tree primary key. The keys are
-- SHA-256 hex, random by design, so every claim inserted into the B-tree landed on a
-- random leaf: at 12.7 M rows the B-tree was 1.5 GB, larger than the 1 GB buffer pool,
-- and a claim missed the pool ~0.6 times an event (pg_statio, the only ledger index
-- that did). A hash index stores a 4-byte hash code per row: 416 MB for the same rows.
-- A COPY of 1,000 fresh claims (backend CPU from /proc, 60 interleaved batches, twice):
-- at 12.7 M rows 27-35 us a row with the B-tree, 8.2-8.5 with the hash; at 300,000
-- rows, where both fit, 7.7-8.0 and 5.8-7.2 (docs/benchmarks.md#ledger).
-- The rule is the same: a second row with a key already committed fails (an
-- exclusion_violation where it was a unique_violation), and one a transaction still
-- holds waits for that transaction, then fails if it committed. Lookups by key
-- (redeliveries, a DLQ replay's refusal, the API's outcome) read the hash index.
-- Postgres cannot make a hash index UNIQUE (it can only be the arbiter of an
-- exclusion constraint), hence the constraint. The table keeps no primary key: it is
-- in no publication, and nothing references it.
ALTER TABLE processed_events DROP CONSTRAINT processed_events_pkey;
ALTER TABLE processed_events
    ADD CONSTRAINT processed_events_key_once EXCLUDE USING hash (idempotency_key WITH =);
