-- A deposit address's past, scanned on request (paystream.schema.scan_backfills): an
-- address registered after its first payment (`paystream addresses add --scan-from`,
-- the API's `scan_from_block`) asks the chain scanner to read from that block up to its
-- cursor for that address alone. The scanner (paystream.finality.scan_service) works a
-- row in ranges, each range's deposits written through the outbox in the transaction
-- that moves `next_block`: a restart resumes there, and a transfer already recorded (a
-- webhook, the scanner's own pass, an earlier backfill) is a duplicate, never a second
-- credit. `up_to_block` is set at the first range: the cursor then, past which the
-- scanner's passes already see the address.
CREATE TABLE chain_scan_backfills (
    backfill_id   BIGSERIAL PRIMARY KEY,
    network       TEXT NOT NULL,
    address       TEXT NOT NULL,
    from_block    BIGINT NOT NULL CHECK (from_block >= 0),
    up_to_block   BIGINT CHECK (up_to_block >= 0),
    next_block    BIGINT NOT NULL CHECK (next_block >= 0),
    requested_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    done_at       TIMESTAMPTZ,
    FOREIGN KEY (network, address) REFERENCES deposit_addresses (network, address)
);
-- The scanner's question each pass: the open backfills of its network.
CREATE INDEX chain_scan_backfills_open_idx ON chain_scan_backfills (network, backfill_id)
    WHERE done_at IS NULL;

-- Least privilege: the operator and the merchant API request a backfill (insert only);
-- the scanner (finality role) reads them and records its progress, nothing else.
GRANT SELECT, INSERT ON chain_scan_backfills TO paystream_ops, paystream_api;
GRANT USAGE ON SEQUENCE chain_scan_backfills_backfill_id_seq TO paystream_ops, paystream_api;
GRANT SELECT ON chain_scan_backfills TO paystream_finality;
GRANT UPDATE (up_to_block, next_block, done_at) ON chain_scan_backfills
    TO paystream_finality;
