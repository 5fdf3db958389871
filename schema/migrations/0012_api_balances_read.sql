-- The merchant API's key lookup, and its most asked read in one call (issue 18).

-- What a live key is: the key with this SHA-256 (0010), not revoked. The one place the
-- rule lives: `api/keys.py` asks it for every route, api_balances below for its own.
-- A plain SQL function: the planner inlines it into the query that calls it.
CREATE FUNCTION api_live_key(key_hash TEXT) RETURNS TABLE (key_id TEXT, scopes TEXT[])
    LANGUAGE sql STABLE AS $$
    SELECT k.key_id, k.scopes FROM api_keys k
     WHERE k.key_hash = api_live_key.key_hash AND k.revoked_at IS NULL
$$;

-- GET /v1/users/{id}/balances in ONE statement: the caller's live key (NULLs: none, and
-- nothing else is read), whether the user exists, and their balances rows now, each as
-- text (asset, available, pending, held; NUMERIC's text is exact). PL/pgSQL because the
-- server keeps its statements' plans for the session: the same reads written as one
-- SQL statement were planned on every call and cost Postgres ~3 times the CPU of the
-- bare one-table read (bench/api_bench.py, docs/api.md#benchmark). Nothing of it is
-- session state a client sees, so it works behind a transaction-pooling PgBouncer.
-- SECURITY INVOKER (the default): it reads only what the caller's role may read.
CREATE FUNCTION api_balances(key_hash TEXT, user_id TEXT,
                             OUT key_id TEXT, OUT scopes TEXT[], OUT user_exists BOOLEAN,
                             OUT balance_rows TEXT[])
    LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT k.key_id, k.scopes INTO key_id, scopes FROM api_live_key(api_balances.key_hash) k;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    user_exists := EXISTS (SELECT FROM users u WHERE u.user_id = api_balances.user_id);
    balance_rows := ARRAY(
        SELECT ARRAY[b.asset, b.balance::text, b.pending::text, b.held::text]
          FROM balances b WHERE b.user_id = api_balances.user_id ORDER BY b.asset);
END
$$;

REVOKE ALL ON FUNCTION api_live_key(TEXT), api_balances(TEXT, TEXT) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION api_live_key(TEXT), api_balances(TEXT, TEXT) TO paystream_api;
