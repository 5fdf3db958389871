-- The settlement message the finality watcher emitted when it decided a deposit, kept
-- with the deposit: after a database failover, a settlement committed but never
-- decoded through the old primary's replication slot (or committed on the new primary
-- before its slot) is published again from here while the deposit still waits for it
-- (finalizing, crediting, reorging, reversing: schema/republish.py). It cannot be
-- rebuilt from the other columns: a verdict's block and `moved`/`unchecked` are not
-- stored. NULL for deposits decided before this column (or by an older release).
--
-- Online: a nullable column without a default changes only the catalog.
ALTER TABLE chain_deposits ADD COLUMN settlement JSONB;
GRANT UPDATE (settlement) ON chain_deposits TO paystream_finality;
