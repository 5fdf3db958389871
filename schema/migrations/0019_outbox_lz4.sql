-- The outbox's payload compressed with lz4, not pglz (the default). The ledger's
-- intents records (one per source partition of a batch, ~250 intents, ~75 KB of JSON)
-- are the only rows large enough to be compressed; pglz cost the ledger's backend ~3 us
-- of CPU per event inserting them, and the walsender decompresses every one for
-- Debezium. Measured on the ledger's own records (2026-12-03, a scratch copy of this
-- table, backend CPU from /proc, five interleaved rounds): insert + delete 12.0 us an
-- event with pglz, 8.75 with lz4; with a read-back as the walsender does, 15.5 and 11.0.
-- The table is always empty (rows are inserted and deleted in one transaction), so
-- nothing is rewritten; Debezium receives the value decompressed either way.
ALTER TABLE outbox ALTER COLUMN payload SET COMPRESSION lz4;
