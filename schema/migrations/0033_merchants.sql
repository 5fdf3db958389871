-- Merchants (tenants): a merchant owns its users, and through them their
-- deposit addresses, balances, events, withdrawals and invoices; an API key belongs to
-- one merchant, or is an operator's key (merchant_id NULL) that sees every merchant. A
-- webhook endpoint receives its merchant's notifications (NULL: an operator's, all).
--
-- The tenancy check is Postgres's row-level security, for the API's role only: each
-- request's key check (api_caller below) sets `paystream.merchant_id` for its
-- transaction, and a RESTRICTIVE policy on every table the API reads or writes by user
-- admits only rows whose user belongs to that merchant. The rule lives here, once
-- (api_sees_user; 0040 gives it an inlined form), under every route's SQL; a route
-- cannot forget it. Every other role
-- keeps seeing every row (a permissive `true` policy: RLS on a table applies to all
-- roles but its owner). docs/api.md#merchants-tenancy.
--
-- Online: the new columns' defaults are constants (no rewrite on Postgres 11+), and
-- what existed belongs to the merchant `m_default`, the default of every new column, so
-- the previous release keeps writing rows that belong to it. Its API (which sets no
-- merchant) sees only m_default's rows, which is all its keys were ever for.

CREATE TABLE merchants (
    merchant_id TEXT PRIMARY KEY CHECK (merchant_id ~ '^m_[0-9a-z_]{1,40}$'),
    name        TEXT NOT NULL CHECK (name ~ '^[\x20-\x7e]{1,100}$'),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO merchants (merchant_id, name) VALUES ('m_default', 'default');

-- The foreign keys are added NOT VALID and validated by 0034 (its own transaction:
-- validation scans users without blocking its writes).
ALTER TABLE users ADD COLUMN merchant_id TEXT NOT NULL DEFAULT 'm_default';
ALTER TABLE users ADD CONSTRAINT users_merchant_fk
    FOREIGN KEY (merchant_id) REFERENCES merchants (merchant_id) NOT VALID;
ALTER TABLE api_keys
    ADD COLUMN merchant_id TEXT DEFAULT 'm_default',
    ADD COLUMN expires_at TIMESTAMPTZ,
    -- Written by the API at most once a minute per key (api/key_use.py), not per request.
    ADD COLUMN last_used_at TIMESTAMPTZ;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_merchant_fk
    FOREIGN KEY (merchant_id) REFERENCES merchants (merchant_id) NOT VALID;
ALTER TABLE notification_endpoints ADD COLUMN merchant_id TEXT DEFAULT 'm_default';
ALTER TABLE notification_endpoints ADD CONSTRAINT notification_endpoints_merchant_fk
    FOREIGN KEY (merchant_id) REFERENCES merchants (merchant_id) NOT VALID;

-- Per-resource scopes; `read` and `write` (every key before this migration) stay, as
-- every resource's read or write scope (api/keys.py).
-- squawk-ignore ban-drop-constraint
ALTER TABLE api_keys DROP CONSTRAINT api_keys_scopes_check;  -- replaced by a wider one
ALTER TABLE api_keys ADD CONSTRAINT api_keys_scopes_known CHECK (
    cardinality(scopes) > 0 AND scopes <@ ARRAY[
        'read', 'write', 'users:read', 'users:write', 'balances:read',
        'transactions:read', 'events:read', 'withdrawals:read', 'withdrawals:write',
        'invoices:read', 'invoices:write', 'endpoints:read', 'endpoints:write']::text[]
) NOT VALID;

-- The request's merchant: set by api_caller in the request's transaction; '*' for an
-- operator's key; m_default when unset (the previous release's API).
CREATE FUNCTION api_merchant() RETURNS TEXT LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('paystream.merchant_id', true), ''), 'm_default')
$$;

-- THE tenancy rule: may the request's key see this user (and what hangs off them)?
CREATE FUNCTION api_sees_user(user_id TEXT) RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
    SELECT api_merchant() = '*' OR EXISTS (
        SELECT FROM users u WHERE u.user_id = api_sees_user.user_id
                              AND u.merchant_id = api_merchant())
$$;

-- What a live key is: not revoked, not expired (one place; api_caller and the previous
-- release's API ask it). Its merchant is a new column: a caller selecting the first two
-- by name is unchanged.
-- squawk-ignore ban-drop-function
DROP FUNCTION api_live_key(TEXT);  -- made again below, with one more column
CREATE FUNCTION api_live_key(key_hash TEXT)
    RETURNS TABLE (key_id TEXT, scopes TEXT[], merchant_id TEXT)
    LANGUAGE sql STABLE AS $$
    SELECT k.key_id, k.scopes, k.merchant_id FROM api_keys k
     WHERE k.key_hash = api_live_key.key_hash AND k.revoked_at IS NULL
       AND (k.expires_at IS NULL OR k.expires_at > now())
$$;

-- The request's caller: its live key, and its merchant set for the rest of the
-- transaction ('-' matches no merchant: no key, nothing is seen). Every /v1 route's
-- first statement (api/auth.py) or its one statement (api_balances) calls it.
CREATE FUNCTION api_caller(key_hash TEXT,
                           OUT key_id TEXT, OUT scopes TEXT[], OUT merchant_id TEXT)
    LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    SELECT k.key_id, k.scopes, k.merchant_id INTO key_id, scopes, merchant_id
      FROM api_live_key(api_caller.key_hash) k;
    PERFORM set_config('paystream.merchant_id',
                       CASE WHEN key_id IS NULL THEN '-' ELSE coalesce(merchant_id, '*') END,
                       true);
END
$$;

-- 0012's one-statement balances read, its key found by api_caller (so its merchant is
-- set before the user and balances reads, which the policies below then filter).
CREATE OR REPLACE FUNCTION api_balances(key_hash TEXT, user_id TEXT,
                                        OUT key_id TEXT, OUT scopes TEXT[],
                                        OUT user_exists BOOLEAN, OUT balance_rows TEXT[])
    LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    SELECT c.key_id, c.scopes INTO key_id, scopes FROM api_caller(api_balances.key_hash) c;
    IF key_id IS NULL THEN
        RETURN;
    END IF;
    user_exists := EXISTS (SELECT FROM users u WHERE u.user_id = api_balances.user_id);
    balance_rows := ARRAY(
        SELECT ARRAY[b.asset, b.balance::text, b.pending::text, b.held::text]
          FROM balances b WHERE b.user_id = api_balances.user_id ORDER BY b.asset);
END
$$;

REVOKE ALL ON FUNCTION api_merchant(), api_sees_user(TEXT), api_caller(TEXT),
    api_live_key(TEXT) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION api_merchant(), api_sees_user(TEXT), api_caller(TEXT),
    api_live_key(TEXT) TO paystream_api;

-- The policies: every role sees every row (`everyone`), and the API's role only what
-- its merchant owns (`merchant_only`, RESTRICTIVE: ANDed with the first).
CREATE POLICY everyone ON users USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON users AS RESTRICTIVE TO paystream_api
    USING (api_merchant() IN (merchant_id, '*'));
CREATE POLICY everyone ON balances USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON balances AS RESTRICTIVE TO paystream_api
    USING (api_sees_user(user_id));
CREATE POLICY everyone ON deposit_addresses USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON deposit_addresses AS RESTRICTIVE TO paystream_api
    USING (api_sees_user(user_id));
CREATE POLICY everyone ON payment_events USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON payment_events AS RESTRICTIVE TO paystream_api
    USING (api_sees_user(user_id));
CREATE POLICY everyone ON accounts USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON accounts AS RESTRICTIVE TO paystream_api
    USING (api_sees_user(owner));
CREATE POLICY everyone ON api_withdrawals USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON api_withdrawals AS RESTRICTIVE TO paystream_api
    USING (api_sees_user(user_id));
CREATE POLICY everyone ON invoices USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON invoices AS RESTRICTIVE TO paystream_api
    USING (api_sees_user(user_id));
CREATE POLICY everyone ON holds USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON holds AS RESTRICTIVE TO paystream_api
    USING (api_sees_user(user_id));
CREATE POLICY everyone ON notification_endpoints USING (true) WITH CHECK (true);
CREATE POLICY merchant_only ON notification_endpoints AS RESTRICTIVE TO paystream_api
    USING (api_merchant() IN (merchant_id, '*'));

ALTER TABLE users ENABLE ROW LEVEL SECURITY;
ALTER TABLE balances ENABLE ROW LEVEL SECURITY;
ALTER TABLE deposit_addresses ENABLE ROW LEVEL SECURITY;
ALTER TABLE payment_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE accounts ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_withdrawals ENABLE ROW LEVEL SECURITY;
ALTER TABLE invoices ENABLE ROW LEVEL SECURITY;
ALTER TABLE holds ENABLE ROW LEVEL SECURITY;
ALTER TABLE notification_endpoints ENABLE ROW LEVEL SECURITY;

-- The API records when each key was last used; the operator lists merchants and makes
-- them (`paystream merchants`), and keys of a merchant; the notifier sends a merchant's
-- notifications to its endpoints only.
GRANT UPDATE (last_used_at) ON api_keys TO paystream_api;
GRANT SELECT, INSERT ON merchants TO paystream_ops;
GRANT SELECT ON merchants TO paystream_api;
GRANT SELECT (user_id, merchant_id) ON users TO paystream_notifier;
-- `notify endpoints add --merchant` / `list` (0011's column grants for the operator).
GRANT SELECT (merchant_id), INSERT (merchant_id) ON notification_endpoints TO paystream_ops;
