-- migrate: autocommit
-- The console finds an event by its trace id with "=" alone (console/search.py), so the
-- index need not be ordered. Trace ids are random (a provider's delivery id, or 128
-- random bits), and a B-tree on them put every stored event's entry on a random leaf
-- of an index as large as the whole history: the ingest's cost per event grew with the
-- events kept. A hash index stores a 4-byte hash code per row, about half the B-tree's
-- pages, and its insert touches one bucket page (docs/benchmarks.md#growth, the A/B of
-- the ingest's write at 1 M and 10 M stored events).
-- Built CONCURRENTLY beside the B-tree, which is dropped only once the hash is valid
-- (the ingest writes on throughout; a failed build leaves an invalid index that the
-- rerun drops first).
DROP INDEX CONCURRENTLY IF EXISTS payment_events_trace_hash;
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_events_trace_hash ON payment_events USING hash (trace_id);
DROP INDEX CONCURRENTLY IF EXISTS payment_events_trace_idx;
