-- What an unresolved statement difference is, once (statements/reads.py lists them, the
-- health check counts them: ops/health.py): a match row whose result is not `matched`
-- and whose newest decision is not `done` (statements/decisions.py). A plain SQL
-- function: the planner inlines it into the query that calls it.
CREATE FUNCTION statement_unresolved(result TEXT, newest_decision_state TEXT)
    RETURNS BOOLEAN LANGUAGE sql IMMUTABLE AS $$
    SELECT result <> 'matched' AND newest_decision_state IS DISTINCT FROM 'done'
$$;
