-- Settlement statements (paystream.statements, docs/statements.md): a provider's
-- balance-transactions export, imported whole or not at all, matched line by line
-- against payment_events, and every operator decision on a difference recorded.
-- Only new tables: nothing an existing writer touches is locked. One owner: the
-- statements package writes all four, as the operator (paystream_ops).

-- One imported file. The same bytes twice are one statement (provider, file hash).
CREATE TABLE statements (
    statement_id  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider      TEXT NOT NULL CHECK (length(provider) BETWEEN 1 AND 100),
    file_sha256   TEXT NOT NULL CHECK (file_sha256 ~ '^[0-9a-f]{64}$'),
    file_name     TEXT NOT NULL CHECK (length(file_name) <= 500),
    -- The columns beyond the documented layout, in file order (kept per line in `extra`).
    extra_columns TEXT[] NOT NULL DEFAULT '{}',
    line_count    BIGINT NOT NULL CHECK (line_count >= 0),
    period_start  TIMESTAMPTZ,
    period_end    TIMESTAMPTZ,
    imported_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    imported_by   TEXT NOT NULL CHECK (length(imported_by) BETWEEN 1 AND 200),
    UNIQUE (provider, file_sha256)
);

-- One line of a statement, as the provider wrote it (signed amounts: a refund's and a
-- payout's are negative; net = amount - fee, checked at import). No foreign key to
-- statements: a million-line import would pay a trigger per row; the importer writes
-- both in one transaction.
CREATE TABLE statement_lines (
    statement_id BIGINT NOT NULL,
    line_no      BIGINT NOT NULL CHECK (line_no >= 2),  -- the file's line (1: header)
    line_id      TEXT NOT NULL CHECK (length(line_id) BETWEEN 1 AND 200),
    type         TEXT NOT NULL
        CHECK (type IN ('payment', 'refund', 'chargeback', 'fee', 'payout')),
    amount       NUMERIC(38, 18) NOT NULL,
    fee          NUMERIC(38, 18) NOT NULL,
    net          NUMERIC(38, 18) NOT NULL,
    currency     TEXT NOT NULL CHECK (length(currency) BETWEEN 1 AND 200),
    created      TIMESTAMPTZ NOT NULL,
    available_on TIMESTAMPTZ,
    payout_id    TEXT,
    reference    TEXT,
    extra        JSONB NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (statement_id, line_no),
    CHECK (net = amount - fee)
);
-- A line id reported again in a later statement is a duplicate (statements/matching.py).
CREATE INDEX statement_lines_line_id_idx ON statement_lines (line_id);

-- The matching's result: one row per line, and one per event of ours in the statement's
-- period and currencies that no line names (missing_at_provider, line_no NULL).
CREATE TABLE statement_matches (
    match_id     BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    statement_id BIGINT NOT NULL,
    line_no      BIGINT,
    event_id     TEXT,
    result       TEXT NOT NULL CHECK (result IN ('matched', 'amount_mismatch', 'fee_mismatch',
                                                 'missing_in_books', 'missing_at_provider',
                                                 'duplicate')),
    expected_fee NUMERIC(38, 18),
    detail       TEXT NOT NULL DEFAULT '' CHECK (length(detail) <= 2000),
    matched_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((line_no IS NULL) = (result = 'missing_at_provider'))
);
-- The statement page and `show`: one statement's rows by result, in line order.
CREATE INDEX statement_matches_by_result_idx
    ON statement_matches (statement_id, result, line_no);

-- Every decision on a difference, only inserted (the audit): the newest per match is its
-- state. A fee adjustment is `proposed`, then `done` once another person approved it.
CREATE TABLE statement_decisions (
    decision_id  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    match_id     BIGINT NOT NULL REFERENCES statement_matches (match_id),
    action       TEXT NOT NULL
        CHECK (action IN ('record_event', 'adjust_fee', 'revert_event', 'acknowledge')),
    state        TEXT NOT NULL CHECK (state IN ('proposed', 'done', 'refused')),
    actor        TEXT NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    reason       TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 1000),
    event_id     TEXT,           -- the event written (record_event, adjust_fee, revert)
    amount       NUMERIC(38, 18),
    decided_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX statement_decisions_by_match_idx ON statement_decisions (match_id, decision_id);

-- Least privilege (0007_roles.sql): the operator imports, matches and decides. It reads
-- payment_events and writes events and adjustments through the outbox already (0009).
GRANT SELECT, INSERT ON statements, statement_lines, statement_matches, statement_decisions
    TO paystream_ops;
-- `statements resolve` writes the event a webhook should have been through the ingest's
-- own write (ingest/payments.py PaymentWrite), which records a refusal (unknown user...).
GRANT INSERT ON refused_deliveries TO paystream_ops;
GRANT UPDATE (attempts, last_refused_at, user_id, detail, trace_id, event)
    ON refused_deliveries TO paystream_ops;
-- Re-matching a statement replaces its results that have no decision yet.
GRANT DELETE ON statement_matches TO paystream_ops;
-- The importer COPYs into a temporary table first (a failed line leaves nothing).
DO $$
BEGIN
    EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO paystream_ops', current_database());
END
$$;
