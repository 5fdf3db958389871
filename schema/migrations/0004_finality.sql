-- Chain deposits wait for finality (issue 6). The LEDGER owns these rows: it inserts a
-- chain deposit as pending in the same transaction that adds its amount to
-- balances.pending, and moves it to final / reorged when it applies the watcher's
-- settlement event. The finality watcher reads the open rows and marks the ones it has
-- emitted a settlement for (finalizing / reorging), so a verdict is emitted once.

-- Event status: a chain deposit is `pending_finality` once the ledger holds it as
-- pending, then `applied` (credited when final) or `reorged` (never credited).
ALTER TABLE payment_events DROP CONSTRAINT payment_events_status_check;
ALTER TABLE payment_events ADD CONSTRAINT payment_events_status_check
    CHECK (status IN ('received', 'pending_finality', 'applied', 'rejected',
                      'dead_lettered', 'reorged'));

CREATE TABLE chain_deposits (
    event_id           TEXT PRIMARY KEY,          -- the deposit's payment event id
    network            TEXT NOT NULL,
    tx_hash            TEXT NOT NULL,
    block_number       BIGINT NOT NULL,           -- as the provider reported it
    block_hash         TEXT,                      -- idem (token logs only)
    log_index          INTEGER,
    token_contract     TEXT,
    recipient          TEXT NOT NULL,
    raw_value          NUMERIC(78, 0) NOT NULL,
    chain              JSONB NOT NULL,            -- PaymentEvent.chain, verbatim
    user_id            TEXT NOT NULL,
    asset              TEXT NOT NULL,
    amount             NUMERIC(38, 18) NOT NULL CHECK (amount > 0),
    trace_id           TEXT NOT NULL,
    -- pending:    held in balances.pending, waiting for the finalized block
    -- suspect:    the provider said a reorg touched it (removed log, block re-hashed)
    -- finalizing: the watcher emitted deposit_finalized; the ledger will credit it
    -- reorging:   the watcher emitted deposit_reorged; the ledger will release it
    -- final / reorged: the ledger applied the settlement (terminal)
    state              TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'suspect', 'finalizing', 'reorging', 'final', 'reorged')),
    suspect_reason     TEXT,
    verdict_reason     TEXT,                      -- why reorged (tx_not_in_chain, ...)
    final_block_number BIGINT,                    -- where it is final (may have moved)
    final_block_hash   TEXT,
    final_log_index    INTEGER,
    -- The on-chain transfer it was finalised as: one transfer is credited once, even
    -- when a re-mined token log (new log index) reached us under a second event id.
    transfer_key       TEXT,
    recorded_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    decided_at         TIMESTAMPTZ,
    settled_at         TIMESTAMPTZ
);
CREATE INDEX chain_deposits_open_idx ON chain_deposits (network, block_number)
    WHERE state IN ('pending', 'suspect', 'finalizing', 'reorging');
CREATE INDEX chain_deposits_block_idx ON chain_deposits (network, block_number, block_hash);
CREATE UNIQUE INDEX chain_deposits_transfer_key_idx ON chain_deposits (transfer_key)
    WHERE transfer_key IS NOT NULL;

-- The journal of the `pending` book: every change of balances.pending, once per
-- (source event, event type). reconcile checks balances.pending = Σ delta.
CREATE TABLE pending_events (
    id              BIGSERIAL PRIMARY KEY,
    source_event_id TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    asset           TEXT NOT NULL,
    delta           NUMERIC(38, 18) NOT NULL CHECK (delta <> 0),
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (source_event_id, event_type),
    FOREIGN KEY (user_id, asset) REFERENCES balances (user_id, asset)
);
CREATE INDEX pending_events_user_asset_idx ON pending_events (user_id, asset);
