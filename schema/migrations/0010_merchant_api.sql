-- The merchant API (issue 18): API keys, withdrawal requests and their idempotency, and
-- the API's own database role.

-- An API key is shown once, when `paystream apikeys create` makes it; only its SHA-256
-- is stored. A fast hash is enough here, unlike for a password: the key is 32 random
-- bytes (256 bits) from the OS's CSPRNG, so a stolen hash cannot be reversed by guessing
-- (no dictionary, 2^255 tries on average at any speed), and a slow KDF only pays off
-- against low-entropy secrets. A fast hash also lets every request find its key by one
-- index lookup, where a salted KDF would cost ~100 ms of CPU per request.
CREATE TABLE api_keys (
    key_id     TEXT PRIMARY KEY CHECK (key_id ~ '^ak_[0-9a-f]{16}$'),
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    key_hash   TEXT NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    scopes     TEXT[] NOT NULL
        CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['read', 'write']::text[]),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at TIMESTAMPTZ
);

-- One row per withdrawal the API requested: the withdrawal_requested event it wrote
-- (payment_events, through the outbox) is the hold; this keeps what the ledger does not
-- need: where the money goes and which key asked.
CREATE TABLE api_withdrawals (
    withdrawal_id TEXT PRIMARY KEY CHECK (withdrawal_id ~ '^api:withdrawal:[0-9a-f]{32}$'),
    key_id        TEXT NOT NULL REFERENCES api_keys (key_id),
    user_id       TEXT NOT NULL REFERENCES users (user_id),
    asset         TEXT NOT NULL,
    amount        NUMERIC(38, 18) NOT NULL CHECK (amount > 0),
    destination   TEXT NOT NULL CHECK (length(destination) BETWEEN 1 AND 200),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- POST /v1/withdrawals' Idempotency-Key, per API key: the hash of the request it first
-- came with and the answer it got. The same key with the same body gets that answer
-- again; with another body, 409. The primary key makes a second, concurrent request
-- with the key wait for the first's commit and then find its row.
CREATE TABLE api_idempotency (
    key_id          TEXT NOT NULL REFERENCES api_keys (key_id),
    idempotency_key TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    request_hash    TEXT NOT NULL CHECK (request_hash ~ '^[0-9a-f]{64}$'),
    status_code     INTEGER NOT NULL CHECK (status_code BETWEEN 200 AND 299),
    response        JSONB NOT NULL,
    withdrawal_id   TEXT NOT NULL REFERENCES api_withdrawals (withdrawal_id)
        DEFERRABLE INITIALLY DEFERRED,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (key_id, idempotency_key)
);

-- A user's history, newest first (GET /v1/users/{id}/transactions): postings by account.
-- postings_account_idx (0008) serves it; transfers by id is their primary key.

-- === The API's role (the pattern of 0007) ==============================================
-- Created NOLOGIN if `paystream stack up` did not create it as LOGIN (stack/postgres.py).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'paystream_api') THEN
        CREATE ROLE paystream_api NOLOGIN;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO paystream_api', current_database());
END
$$;
GRANT USAGE ON SCHEMA public TO paystream_api;

-- api (api/*.py): reads the books, events and holds it reports; creates users and
-- deposit addresses (schema/users.py); requests withdrawals as the ingest records a
-- delivery (schema/outbox.py: payment_events + an outbox row inserted and deleted) with
-- its own two tables; authenticates by api_keys. Never the balances or journals' writes.
GRANT SELECT ON users, balances, deposit_addresses, payment_events, processed_events,
    holds, accounts, transfers, postings, user_entries, api_keys TO paystream_api;
GRANT INSERT ON users, deposit_addresses, payment_events TO paystream_api;
GRANT SELECT, INSERT, DELETE ON outbox TO paystream_api;  -- DELETE ... WHERE reads it
GRANT SELECT, INSERT ON api_withdrawals, api_idempotency TO paystream_api;
-- ops: `paystream apikeys create / list / revoke` (api/keys.py).
GRANT SELECT, INSERT ON api_keys TO paystream_ops;
GRANT UPDATE (revoked_at) ON api_keys TO paystream_ops;
GRANT SELECT ON api_withdrawals, api_idempotency TO paystream_ops;
