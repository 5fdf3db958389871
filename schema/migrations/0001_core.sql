-- The tables that carry paystream's correctness. Every amount is NUMERIC(38,18);
-- every rule that money depends on is a database constraint, not application code.

CREATE TABLE users (
    user_id    TEXT PRIMARY KEY CHECK (user_id ~ '^[A-Za-z0-9_.:-]{1,64}$'),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Balances are per (user, asset): a USDC deposit and an ETH deposit are never one number.
-- `pending` holds chain deposits seen but not yet final (visible, not spendable).
CREATE TABLE balances (
    user_id    TEXT NOT NULL REFERENCES users (user_id),
    asset      TEXT NOT NULL CHECK (length(asset) BETWEEN 1 AND 200),
    balance    NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (balance >= 0),
    pending    NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (pending >= 0),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, asset)
);

-- Chain events name addresses, not users: this table says who owns a deposit address.
-- Addresses are stored lowercased so lookups compare case-insensitively.
CREATE TABLE deposit_addresses (
    network    TEXT NOT NULL,
    address    TEXT NOT NULL CHECK (address = lower(address)),
    user_id    TEXT NOT NULL REFERENCES users (user_id),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (network, address)
);

-- One row per accepted payment event. `content_hash` tells an identical redelivery
-- (same hash: duplicate) from a conflicting one (same id, other hash: 409).
CREATE TABLE payment_events (
    event_id          TEXT PRIMARY KEY CHECK (length(event_id) BETWEEN 1 AND 200),
    provider          TEXT NOT NULL,
    event_type        TEXT NOT NULL
        CHECK (event_type IN ('deposit', 'airdrop', 'withdrawal', 'withdrawal_fee')),
    user_id           TEXT NOT NULL,
    asset             TEXT NOT NULL,
    amount            NUMERIC(38, 18) NOT NULL CHECK (amount > 0),
    status            TEXT NOT NULL DEFAULT 'received'
        CHECK (status IN ('received', 'applied', 'rejected', 'dead_lettered')),
    content_hash      TEXT NOT NULL,
    trace_id          TEXT NOT NULL,
    payload           JSONB NOT NULL,
    received_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    status_changed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX payment_events_received_idx ON payment_events (received_at)
    WHERE status = 'received';

-- The transactional outbox read by Debezium's Outbox Event Router. Rows are inserted
-- and deleted in the same transaction: the WAL carries the insert, the table stays empty.
CREATE TABLE outbox (
    id            UUID PRIMARY KEY,
    aggregatetype TEXT NOT NULL,
    aggregateid   TEXT NOT NULL,
    type          TEXT NOT NULL,
    event_id      TEXT NOT NULL,
    payload       JSONB NOT NULL,
    trace_id      TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Idempotency of the ledger: key = SHA-256 of the length-prefixed (event_id, event_type).
CREATE TABLE processed_events (
    idempotency_key TEXT PRIMARY KEY CHECK (idempotency_key ~ '^[0-9a-f]{64}$'),
    event_id        TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    outcome         TEXT NOT NULL
        CHECK (outcome IN ('applied', 'insufficient_funds', 'pending_finality', 'reorged')),
    processed_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX processed_events_processed_at_idx ON processed_events (processed_at);

-- The journal: every balance change, once per (source event, event type).
CREATE TABLE balance_events (
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
CREATE INDEX balance_events_user_asset_idx ON balance_events (user_id, asset);

-- Mirror of the DLQ topic, idempotent on the origin of the dead message.
CREATE TABLE dead_letter_queue (
    id               BIGSERIAL PRIMARY KEY,
    source_topic     TEXT NOT NULL,
    source_partition INTEGER NOT NULL,
    source_offset    BIGINT NOT NULL,
    message_key      TEXT,
    headers          JSONB NOT NULL DEFAULT '{}'::jsonb,
    payload          TEXT,
    event_id         TEXT,
    error_reason     TEXT NOT NULL,
    error_detail     TEXT NOT NULL,
    attempts         JSONB NOT NULL DEFAULT '[]'::jsonb,
    status           TEXT NOT NULL DEFAULT 'open'
        CHECK (status IN ('open', 'replayed', 'discarded')),
    first_seen_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (source_topic, source_partition, source_offset)
);
CREATE INDEX dead_letter_queue_event_idx ON dead_letter_queue (event_id);

-- Debezium's heartbeat writes here so a quiet outbox does not pin WAL.
CREATE TABLE debezium_heartbeat (
    id        INTEGER PRIMARY KEY,
    last_beat TIMESTAMPTZ NOT NULL
);

CREATE PUBLICATION paystream_outbox FOR TABLE outbox, debezium_heartbeat;
