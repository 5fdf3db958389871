-- processed_events (the ledger's claims) is to be partitioned by the UTC day its event
-- was received on, so housekeeping forgets a day of claims by dropping its partition
-- instead of deleting its rows (docs/architecture.md, "Direction"). The day is the
-- event's, not the claim's: every claim of one event then lands in one partition, and
-- a per-partition key constraint still makes a second claim of it conflict.
-- Expand, step 1 (one release): the column, written by this release's ledger with
-- each claim. NULL is a claim written before it (the previous release's ledger names
-- no day); the release that swaps the table keeps such rows in the partition that
-- takes what has no day of its own, forgotten by rows as today.
ALTER TABLE processed_events ADD COLUMN event_day DATE;
