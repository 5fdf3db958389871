-- Credit before finality, and its compensating debit (issue 6 item 3). A network with a
-- credit depth (PAYSTREAM_FINALITY_CREDIT_DEPTH_<NET>) credits a deposit once it is that
-- many blocks deep; the watcher keeps re-checking it until its block is final, and a
-- reorg that removes it is answered by a `deposit_reversed` event: a debit of the
-- amount, and whatever available cannot cover recorded as a shortfall (never clamped).

-- Event status of the deposit: pending_finality -> credited (spendable, not final)
-- -> applied (final) | reversed (the compensating debit was applied).
ALTER TABLE payment_events DROP CONSTRAINT payment_events_status_check;
ALTER TABLE payment_events ADD CONSTRAINT payment_events_status_check
    CHECK (status IN ('received', 'pending_finality', 'credited', 'applied', 'rejected',
                      'dead_lettered', 'reorged', 'reversed'));

-- Outcomes: `credited` (a deposit_credited whose deposit is not final yet: waiting,
-- housekeeping keeps it), `reversed` (a chain deposit whose credit was reversed),
-- `shortfall` (a reversal available could not fully cover), `account_flagged` (a debit
-- refused because the user has an open shortfall).
ALTER TABLE processed_events DROP CONSTRAINT processed_events_outcome_check;
ALTER TABLE processed_events ADD CONSTRAINT processed_events_outcome_check
    CHECK (outcome IN ('applied', 'insufficient_funds', 'pending_finality', 'reorged',
                       'credited', 'reversed', 'shortfall', 'account_flagged'));

-- chain_deposits, new states (watcher writes the -ing ones with the event, the ledger
-- the others with the money):
--   crediting: the watcher emitted deposit_credited (deep enough, not final)
--   credited:  the ledger moved it to available; the watcher re-checks it every tick
--   finalizing (from credited): deposit_finalized with chain.credited = true, no money
--   reversing: the watcher emitted deposit_reversed
--   reversed:  the ledger applied the compensating debit (terminal)
ALTER TABLE chain_deposits DROP CONSTRAINT chain_deposits_state_check;
ALTER TABLE chain_deposits ADD CONSTRAINT chain_deposits_state_check
    CHECK (state IN ('pending', 'suspect', 'crediting', 'credited', 'finalizing',
                     'reorging', 'reversing', 'final', 'reorged', 'reversed'));
-- Set by the ledger when it credits before finality: tells the two finalisation paths
-- apart for good (a final deposit was credited once, either way).
ALTER TABLE chain_deposits ADD COLUMN credited_at TIMESTAMPTZ;
-- The credit height at which the watcher first found a credited deposit missing (gone,
-- reverted, mismatched) before finality; cleared when it is found again. The reversal
-- waits PAYSTREAM_FINALITY_REORG_GRACE_BLOCKS past it (a dropped tx may be re-mined).
ALTER TABLE chain_deposits ADD COLUMN missing_since_block BIGINT;
CREATE INDEX chain_deposits_credited_idx ON chain_deposits (network, block_number)
    WHERE state = 'credited';

-- What a reversal could not take from available. An open row (resolved_at IS NULL)
-- FLAGS the user: every withdrawal of that user is refused (outcome account_flagged)
-- until an operator resolves all of them. balance_events records exactly what moved,
-- so reconcile still holds; this table is the rest of the story.
CREATE TABLE account_shortfalls (
    id               BIGSERIAL PRIMARY KEY,
    user_id          TEXT NOT NULL,
    asset            TEXT NOT NULL,
    source_event_id  TEXT NOT NULL UNIQUE,     -- the deposit_reversed event
    deposit_event_id TEXT NOT NULL,
    amount           NUMERIC(38, 18) NOT NULL CHECK (amount > 0),  -- owed, not taken
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    resolved_at      TIMESTAMPTZ,
    resolution       TEXT,
    FOREIGN KEY (user_id, asset) REFERENCES balances (user_id, asset)
);
CREATE INDEX account_shortfalls_open_idx ON account_shortfalls (user_id)
    WHERE resolved_at IS NULL;
