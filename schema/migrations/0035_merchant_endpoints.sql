-- Merchants manage their own webhook endpoints over the API (docs/api.md
-- #endpoints): create, change, delete, read and rotate the secret, page through the
-- delivery log, redeliver, recover, send a test. Every action is recorded
-- (endpoint_actions), each write once per Idempotency-Key.

-- A description; deleted_at: gone for its merchant (the slots and attempts that name it
-- stay, for the books of what was sent); the first bytes of each answer, for the log.
ALTER TABLE notification_endpoints
    ADD COLUMN description TEXT,
    ADD COLUMN deleted_at TIMESTAMPTZ;
ALTER TABLE notification_endpoints ADD CONSTRAINT notification_endpoints_description_length
    CHECK (length(description) <= 500) NOT VALID;  -- a new column: nothing to validate
ALTER TABLE notification_attempts ADD COLUMN response_head TEXT;

-- What was done to an endpoint, by whom: `api:<key id>`, `operator`, or `notifier` (it
-- disabled one failing too long). A write sent with an Idempotency-Key is done once per
-- (actor, key): the same request again answers `response` again; another, 409.
CREATE TABLE endpoint_actions (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id      TEXT NOT NULL REFERENCES notification_endpoints (endpoint_id),
    merchant_id      TEXT REFERENCES merchants (merchant_id),  -- NULL: an operator's
    actor            TEXT NOT NULL CHECK (actor ~ '^(api:ak_[0-9a-f]{16}|operator|notifier)$'),
    action           TEXT NOT NULL CHECK (action IN ('create', 'update', 'delete',
                         'rotate_secret', 'redeliver', 'recover', 'test', 'disabled')),
    detail           JSONB NOT NULL DEFAULT '{}'::jsonb,
    idempotency_key  TEXT CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    request_hash     TEXT CHECK (request_hash ~ '^[0-9a-f]{64}$'),
    response         JSONB,
    at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (actor, idempotency_key)
);
CREATE INDEX endpoint_actions_by_endpoint ON endpoint_actions (endpoint_id, id);

-- The tenancy rule for what hangs off an endpoint (0033's api_sees_user for users).
CREATE FUNCTION api_sees_endpoint(endpoint_id TEXT) RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
    SELECT api_merchant() = '*' OR EXISTS (
        SELECT FROM notification_endpoints e
         WHERE e.endpoint_id = api_sees_endpoint.endpoint_id
           AND e.merchant_id = api_merchant())
$$;
REVOKE ALL ON FUNCTION api_sees_endpoint(TEXT) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION api_sees_endpoint(TEXT) TO paystream_api;

CREATE POLICY everyone ON notification_deliveries USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON notification_deliveries AS RESTRICTIVE TO paystream_api
    USING (api_sees_endpoint(endpoint_id));
CREATE POLICY everyone ON notification_attempts USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON notification_attempts AS RESTRICTIVE TO paystream_api
    USING (api_sees_endpoint(endpoint_id));
CREATE POLICY everyone ON endpoint_actions USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON endpoint_actions AS RESTRICTIVE TO paystream_api
    USING (api_merchant() IN (merchant_id, '*'));
-- An intent is seen through a slot of a visible endpoint; the API makes only tests.
CREATE POLICY everyone ON notification_intents USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON notification_intents AS RESTRICTIVE FOR SELECT
    TO paystream_api USING (EXISTS (SELECT FROM notification_deliveries d
                                     WHERE d.intent_id = notification_intents.intent_id));
CREATE POLICY tests_only ON notification_intents AS RESTRICTIVE FOR INSERT
    TO paystream_api WITH CHECK (type = 'endpoint.test');
ALTER TABLE notification_intents ENABLE ROW LEVEL SECURITY;
ALTER TABLE notification_deliveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE notification_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE endpoint_actions ENABLE ROW LEVEL SECURITY;

-- The API (api/routes_endpoints.py, notify/merchant_endpoints.py): its merchant's
-- endpoints, their secrets (a merchant reads its own signing key, as Svix shows it), the
-- rotation (0011's owner function: the API checks the endpoint is its merchant's first),
-- the delivery log, redeliveries, and a test intent with its one slot.
GRANT SELECT, INSERT (endpoint_id, url, event_types, secret, merchant_id, description)
    ON notification_endpoints TO paystream_api;
GRANT UPDATE (url, event_types, description, disabled_at, disabled_reason, failing_since,
              deleted_at) ON notification_endpoints TO paystream_api;
GRANT EXECUTE ON FUNCTION rotate_notification_secret(TEXT, BYTEA, INTERVAL) TO paystream_api;
GRANT SELECT, INSERT ON notification_intents TO paystream_api;
GRANT SELECT, INSERT (intent_id, endpoint_id) ON notification_deliveries TO paystream_api;
GRANT UPDATE (state, attempts, next_attempt_at) ON notification_deliveries TO paystream_api;
GRANT SELECT ON notification_attempts TO paystream_api;
GRANT SELECT, INSERT ON endpoint_actions TO paystream_api, paystream_ops, paystream_notifier;
-- ops reads the new columns and deletes nothing; the notifier records the answers' heads.
GRANT SELECT (description, deleted_at) ON notification_endpoints TO paystream_ops;
