-- Notifications (issue 15): the endpoints that receive signed webhooks, the intents the
-- notifier read from paystream.notifications, one delivery slot per (intent, endpoint)
-- claimed before any send, and every attempt. docs/notifications.md explains the flow.

-- An endpoint. `secret` is the raw HMAC key the notifier signs with: a sender needs the
-- key itself (it cannot be stored hashed like an API key, which is only ever compared),
-- so it is kept out of reach instead: only the notifier's role may read the column; the
-- operator's role may write it (add, rotate-secret) but never read it back, and the CLI
-- shows a secret once, when it is made. `previous_secret` signs alongside the new one
-- until `previous_secret_until` after a rotation, so receivers can switch without a gap
-- (Standard Webhooks lists several signatures).
CREATE TABLE notification_endpoints (
    endpoint_id            TEXT PRIMARY KEY CHECK (endpoint_id ~ '^ep_[0-9a-f]{24}$'),
    url                    TEXT NOT NULL CHECK (url ~ '^https?://' AND length(url) <= 2000),
    user_id                TEXT,                    -- only this user's intents (NULL: all)
    event_types            TEXT[] NOT NULL DEFAULT '{}',  -- filters (empty: every type)
    secret                 BYTEA NOT NULL CHECK (length(secret) BETWEEN 24 AND 64),
    previous_secret        BYTEA,
    previous_secret_until  TIMESTAMPTZ,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- The first failure of the current run of failures (NULL after a success): an
    -- endpoint failing for longer than PAYSTREAM_NOTIFY_DISABLE_AFTER_S is disabled.
    failing_since          TIMESTAMPTZ,
    disabled_at            TIMESTAMPTZ,
    disabled_reason        TEXT
);

-- An intent as the notifier read it (the topic's record, validated): the body every
-- delivery of it sends. The id is derived from its source event and type.
CREATE TABLE notification_intents (
    intent_id    TEXT PRIMARY KEY CHECK (intent_id ~ '^ntf_[0-9a-f]{32}$'),
    type         TEXT NOT NULL,
    user_id      TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    data         JSONB NOT NULL,
    trace_id     TEXT,
    recorded_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The delivery slot: one per (intent, endpoint), inserted ON CONFLICT DO NOTHING by the
-- notifier consumer and committed before its offsets and before any send. A sender
-- claims it with a lease (claimed_until, claim_id) and records the outcome only while
-- its claim_id is still the slot's: a sender that crashed lets the lease lapse and the
-- next claim sends again with the same webhook-id (the intent id).
CREATE TABLE notification_deliveries (
    intent_id        TEXT NOT NULL REFERENCES notification_intents (intent_id),
    endpoint_id      TEXT NOT NULL REFERENCES notification_endpoints (endpoint_id),
    state            TEXT NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,  -- claims so far (a crashed one counts)
    next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_until    TIMESTAMPTZ,
    claim_id         UUID,
    last_status      INTEGER,
    last_error       TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    delivered_at     TIMESTAMPTZ,
    PRIMARY KEY (intent_id, endpoint_id)
);
-- What the sender claims: pending slots that are due, per endpoint, oldest first.
CREATE INDEX notification_deliveries_due
    ON notification_deliveries (endpoint_id, next_attempt_at) WHERE state = 'pending';

-- Every attempt, as it ended (a crashed attempt leaves no row: its claim counted it).
CREATE TABLE notification_attempts (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    intent_id    TEXT NOT NULL,
    endpoint_id  TEXT NOT NULL,
    attempt      INTEGER NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    latency_s    DOUBLE PRECISION NOT NULL,
    status_code  INTEGER,              -- NULL: no answer (timeout, refused, reset)
    error        TEXT,                 -- NULL: a 2xx
    FOREIGN KEY (intent_id, endpoint_id)
        REFERENCES notification_deliveries (intent_id, endpoint_id)
);
CREATE INDEX notification_attempts_delivery
    ON notification_attempts (intent_id, endpoint_id);

-- A scheduled reminder, claimed by its key `<kind>:<subject>:<cycle>` (the cycle names
-- the occurrence: a second shortfall of the same user is a new cycle) in the transaction
-- that records its intent and slots: a reminder is made once, whatever restarts.
CREATE TABLE notification_reminders (
    reminder_key  TEXT PRIMARY KEY,
    intent_id     TEXT NOT NULL REFERENCES notification_intents (intent_id),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- notifier: its own login role (stack/postgres.py creates it LOGIN on a local stack).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'paystream_notifier') THEN
        CREATE ROLE paystream_notifier NOLOGIN;
    END IF;
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO paystream_notifier', current_database());
END
$$;
GRANT USAGE ON SCHEMA public TO paystream_notifier;

-- notifier (consumers/notifier.py, notify/delivery.py): reads the endpoints (with their
-- secrets) and marks one failing or disabled; records intents and slots; claims,
-- records and reschedules slots; inserts attempts.
GRANT SELECT ON notification_endpoints TO paystream_notifier;
GRANT UPDATE (failing_since, disabled_at, disabled_reason) ON notification_endpoints
    TO paystream_notifier;
GRANT SELECT, INSERT ON notification_intents, notification_deliveries TO paystream_notifier;
GRANT UPDATE (state, attempts, next_attempt_at, claimed_until, claim_id, last_status,
              last_error, delivered_at) ON notification_deliveries TO paystream_notifier;
GRANT SELECT, INSERT ON notification_attempts TO paystream_notifier;
-- The reminders (notify/reminders.py): their keys, and what they remind of.
GRANT SELECT, INSERT ON notification_reminders TO paystream_notifier;
GRANT SELECT (id, user_id, asset, source_event_id, amount, created_at, resolved_at)
    ON account_shortfalls TO paystream_notifier;
GRANT SELECT (event_id, network, user_id, asset, amount, state, recorded_at)
    ON chain_deposits TO paystream_notifier;
GRANT SELECT (hold_id, user_id, asset, amount, state, expires_at) ON holds
    TO paystream_notifier;

-- ops (notify/endpoints.py): adds, lists, disables and rotates endpoints, never reading
-- a secret back; reads the intents, slots and attempts it reports on.
GRANT SELECT (endpoint_id, url, user_id, event_types, previous_secret_until, created_at,
              failing_since, disabled_at, disabled_reason) ON notification_endpoints
    TO paystream_ops;
GRANT INSERT (endpoint_id, url, user_id, event_types, secret) ON notification_endpoints
    TO paystream_ops;
GRANT UPDATE (failing_since, disabled_at, disabled_reason) ON notification_endpoints
    TO paystream_ops;
-- A rotation keeps the old key as previous_secret: that copies a column ops may not read,
-- so it runs as the owner, for one endpoint, and answers only whether it was found.
CREATE FUNCTION rotate_notification_secret(endpoint TEXT, new_secret BYTEA,
                                           overlap INTERVAL) RETURNS BOOLEAN
    LANGUAGE sql SECURITY DEFINER SET search_path = public AS $$
    UPDATE notification_endpoints
       SET previous_secret = secret, previous_secret_until = now() + overlap,
           secret = new_secret
     WHERE endpoint_id = endpoint
    RETURNING true
$$;
REVOKE ALL ON FUNCTION rotate_notification_secret(TEXT, BYTEA, INTERVAL) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rotate_notification_secret(TEXT, BYTEA, INTERVAL) TO paystream_ops;
GRANT SELECT ON notification_intents, notification_deliveries, notification_attempts,
    notification_reminders TO paystream_ops;
-- `paystream notifications redeliver | recover` (notify/operator.py): a slot due again,
-- its schedule started over; a redelivery to an endpoint that had no slot makes one.
GRANT INSERT (intent_id, endpoint_id) ON notification_deliveries TO paystream_ops;
GRANT UPDATE (state, attempts, next_attempt_at) ON notification_deliveries TO paystream_ops;
