-- The chain scanner's place on each network (paystream.finality.scan_store): the last
-- block it scanned and that block's hash. The scanner moves the row in the transaction
-- that writes the deposits it found in the blocks up to it, so a crash never skips a
-- block nor records one twice; a hash that no longer matches the chain is a reorg below
-- the cursor, rescanned. Two scanners of one network by mistake: each pass locks the row
-- (FOR UPDATE NOWAIT), the second one finds it taken and waits for its next pass.
CREATE TABLE chain_scan_cursors (
    network       TEXT PRIMARY KEY,
    block_number  BIGINT NOT NULL CHECK (block_number >= 0),
    block_hash    TEXT NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Least privilege (0007_roles.sql): the scanner runs as the finality role, the process
-- family that reads the chain (it shares the watcher's RPC client, breaker and
-- settings). It reads the deposit addresses, records the deposits it found as the
-- ingest does (payment_events + outbox, which the role already writes) and moves its
-- cursor. It never touches balances, journals or chain_deposits (the ledger does).
GRANT SELECT, INSERT ON payment_events TO paystream_finality;
GRANT SELECT ON deposit_addresses TO paystream_finality;
GRANT SELECT, INSERT ON chain_scan_cursors TO paystream_finality;
GRANT UPDATE (block_number, block_hash, updated_at) ON chain_scan_cursors
    TO paystream_finality;
-- The operator reads it (a scan's lag, `paystream chain scan`'s report).
GRANT SELECT ON chain_scan_cursors TO paystream_ops;
