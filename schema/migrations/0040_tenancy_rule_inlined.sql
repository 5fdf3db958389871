-- The tenancy rule in a form Postgres inlines: set-returning SQL functions, so that a
-- policy's `EXISTS (SELECT FROM api_user_visible(user_id))` becomes an index probe of
-- users (of notification_endpoints for api_endpoint_visible) inside the query. 0033's
-- api_sees_user and 0035's api_sees_endpoint are scalar functions holding a subquery:
-- never inlined, they ran once per row and cost the balances read 80 % more Postgres
-- CPU (bench-api; docs/benchmarks.md). The rule itself is unchanged: the request's
-- merchant, or '*' for an operator's key.
--
-- Online and safe to run on any database: CREATE OR REPLACE, and ALTER POLICY swaps a
-- policy's expression in place (a short lock on each table, no rewrite; the runner's
-- lock_timeout and retries apply). The scalar functions go: only the policies called
-- them, never the code of any release. A database migrated while 0033 and 0035 briefly
-- held the inlined form ends the same as any other (tests/integration/
-- test_upgrade_path.py compares them).

CREATE OR REPLACE FUNCTION api_user_visible(user_id TEXT) RETURNS SETOF BOOLEAN
    LANGUAGE sql STABLE AS $$
    SELECT true FROM users u WHERE u.user_id = api_user_visible.user_id
                               AND api_merchant() IN (u.merchant_id, '*')
$$;
CREATE OR REPLACE FUNCTION api_endpoint_visible(endpoint_id TEXT) RETURNS SETOF BOOLEAN
    LANGUAGE sql STABLE AS $$
    SELECT true FROM notification_endpoints e
     WHERE e.endpoint_id = api_endpoint_visible.endpoint_id
       AND api_merchant() IN (e.merchant_id, '*')
$$;
REVOKE ALL ON FUNCTION api_user_visible(TEXT), api_endpoint_visible(TEXT) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION api_user_visible(TEXT), api_endpoint_visible(TEXT)
    TO paystream_api;

ALTER POLICY merchant_only ON balances USING (EXISTS (SELECT FROM api_user_visible(user_id)));
ALTER POLICY merchant_only ON deposit_addresses
    USING (EXISTS (SELECT FROM api_user_visible(user_id)));
ALTER POLICY merchant_only ON payment_events
    USING (EXISTS (SELECT FROM api_user_visible(user_id)));
ALTER POLICY merchant_only ON accounts USING (EXISTS (SELECT FROM api_user_visible(owner)));
ALTER POLICY merchant_only ON api_withdrawals
    USING (EXISTS (SELECT FROM api_user_visible(user_id)));
ALTER POLICY merchant_only ON invoices USING (EXISTS (SELECT FROM api_user_visible(user_id)));
ALTER POLICY merchant_only ON holds USING (EXISTS (SELECT FROM api_user_visible(user_id)));
ALTER POLICY merchant_only ON notification_deliveries
    USING (EXISTS (SELECT FROM api_endpoint_visible(endpoint_id)));
ALTER POLICY merchant_only ON notification_attempts
    USING (EXISTS (SELECT FROM api_endpoint_visible(endpoint_id)));
-- The day partitions' first one, 0039's renamed table: its own policy, the same rule.
ALTER POLICY merchant_only ON notification_attempts_legacy
    USING (EXISTS (SELECT FROM api_endpoint_visible(endpoint_id)));

-- No release's code calls these; only the policies did.
-- squawk-ignore ban-drop-function
DROP FUNCTION IF EXISTS api_sees_user(TEXT);
-- squawk-ignore ban-drop-function
DROP FUNCTION IF EXISTS api_sees_endpoint(TEXT);
