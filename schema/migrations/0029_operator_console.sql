-- The operator console (console/, docs/console.md): its keys, its sessions, the record
-- of every operator action taken through it, a dead letter's discard reason, and the
-- indexes its search and pages read by (no page scans a table).

-- Console keys: made by `paystream console keys create`, shown once, stored only as
-- SHA-256 of 256 random bits (as api_keys, migration 0010: a fast hash suffices).
CREATE TABLE console_keys (
    key_id     TEXT PRIMARY KEY CHECK (key_id ~ '^ck_[0-9a-f]{16}$'),
    name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    key_hash   TEXT NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at TIMESTAMPTZ
);

-- A login's session: the cookie's token is never stored, only its SHA-256. A session
-- ends at expires_at, at logout (ended_at), or when its key is revoked.
CREATE TABLE console_sessions (
    session_hash TEXT PRIMARY KEY CHECK (session_hash ~ '^[0-9a-f]{64}$'),
    key_id       TEXT NOT NULL REFERENCES console_keys (key_id),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL,
    ended_at     TIMESTAMPTZ
);
CREATE INDEX console_sessions_expiry_idx ON console_sessions (expires_at);

-- Who did what, when, and how it ended: every POST of the console (logins, failed ones
-- too, replays, discards, redeliveries, endpoint changes, shortfall resolutions). Only
-- inserted: nobody updates or deletes the record.
CREATE TABLE operator_actions (
    id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor   TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    action  TEXT NOT NULL CHECK (length(action) BETWEEN 1 AND 100),
    target  TEXT NOT NULL CHECK (length(target) <= 500),
    result  TEXT NOT NULL CHECK (result IN ('done', 'refused')),
    detail  TEXT NOT NULL DEFAULT '' CHECK (length(detail) <= 2000)
);
-- The ledger page's "last reconcile run": the newest record of one action.
CREATE INDEX operator_actions_action_idx ON operator_actions (action, id DESC);

-- A dead letter discarded on purpose says why (`paystream dlq discard ID --reason`).
ALTER TABLE dead_letter_queue ADD COLUMN discard_reason TEXT
    CHECK (discard_reason IS NULL OR length(discard_reason) BETWEEN 1 AND 1000);
ALTER TABLE dead_letter_queue ADD CONSTRAINT dead_letter_queue_discard_says_why
    CHECK ((status = 'discarded') = (discard_reason IS NOT NULL));
-- The dead-letter page: newest first within a status, a status and a reason (the open
-- ones of a reason that has many replayed; the open backlog counted by reason from the
-- index alone), or a reason in every status. The page's ids are read from an index
-- alone (ops/replay.py), its age filter too: first_seen_at is carried in each. A walk of
-- the primary key that filters every row would cost the heap; this one does not, so
-- the planner does not trade one for the other by how common it thinks a status is.
CREATE INDEX dead_letter_queue_status_idx ON dead_letter_queue (status, id DESC)
    INCLUDE (first_seen_at);
CREATE INDEX dead_letter_queue_status_reason_idx
    ON dead_letter_queue (status, error_reason, id DESC) INCLUDE (first_seen_at);
CREATE INDEX dead_letter_queue_reason_idx ON dead_letter_queue (error_reason, id DESC)
    INCLUDE (status, first_seen_at);
-- The provider of a dead letter's stored event, recorded by the mirror when it marks the
-- event dead-lettered (the contents matched: a forged record names no provider), and
-- kept through replay and discard: the page's provider filter reads its index alone.
ALTER TABLE dead_letter_queue ADD COLUMN provider TEXT;
UPDATE dead_letter_queue d SET provider = p.provider FROM payment_events p
    WHERE p.event_id = d.event_id AND p.status = 'dead_lettered';
CREATE INDEX dead_letter_queue_provider_idx ON dead_letter_queue (provider, status, id DESC)
    INCLUDE (first_seen_at);
GRANT UPDATE (provider) ON dead_letter_queue TO paystream_mirror;

-- Search: an event by its trace id, a user's events newest first, a chain transfer by
-- its hash or recipient, an address without its network, a merchant's idempotency key.
CREATE INDEX payment_events_trace_idx ON payment_events (trace_id);
CREATE INDEX payment_events_user_idx ON payment_events (user_id, received_at DESC);
CREATE INDEX chain_deposits_tx_idx ON chain_deposits (tx_hash);
CREATE INDEX chain_deposits_recipient_idx ON chain_deposits (recipient, recorded_at DESC);
CREATE INDEX deposit_addresses_address_idx ON deposit_addresses (address);
-- A merchant's Idempotency-Key without the API key it came with.
CREATE INDEX api_idempotency_key_idx ON api_idempotency (idempotency_key);
-- The user page: one user's open holds and shortfalls, not every user's.
CREATE INDEX holds_open_by_user_idx ON holds (user_id) WHERE state IN ('held', 'expiring');
CREATE INDEX account_shortfalls_user_idx ON account_shortfalls (user_id, id);

-- Least privilege (0007_roles.sql): the console runs as the operator, paystream_ops,
-- which gets its own tables and the discard; nothing of the console is granted to
-- another role.
GRANT SELECT, INSERT ON console_keys TO paystream_ops;
GRANT UPDATE (revoked_at) ON console_keys TO paystream_ops;
GRANT SELECT, INSERT ON console_sessions TO paystream_ops;
GRANT UPDATE (ended_at) ON console_sessions TO paystream_ops;
GRANT SELECT, INSERT ON operator_actions TO paystream_ops;
GRANT UPDATE (discard_reason) ON dead_letter_queue TO paystream_ops;
