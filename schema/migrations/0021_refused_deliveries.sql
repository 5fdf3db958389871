-- Signed, valid gateway deliveries the ingest refused (422) because they are known not
-- to apply: their user does not exist (`unknown_user`), or they name a stored event of
-- another user (`reference_of_other_user`). Such an event never reaches payment_events
-- or the outbox (the ledger could only reject it); it is kept here for inspection.
-- One row per (provider, event, code): a provider's retries of the same refusal add
-- attempts, not rows. Once the user exists, the same delivery is accepted; its row
-- stays as the record of the earlier refusals.
CREATE TABLE refused_deliveries (
    provider         TEXT NOT NULL,
    event_id         TEXT NOT NULL CHECK (length(event_id) BETWEEN 1 AND 200),
    code             TEXT NOT NULL
        CHECK (code IN ('unknown_user', 'reference_of_other_user')),
    user_id          TEXT NOT NULL,
    detail           TEXT NOT NULL,
    trace_id         TEXT NOT NULL,               -- the latest attempt's
    event            JSONB NOT NULL,              -- the validated event, as the latest attempt sent it
    first_refused_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_refused_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    attempts         INTEGER NOT NULL DEFAULT 1 CHECK (attempts >= 1),
    PRIMARY KEY (provider, event_id, code)
);
-- `who was refused lately`: the operator's first question (docs/operations.md).
CREATE INDEX refused_deliveries_last_idx ON refused_deliveries (last_refused_at);

-- Least privilege (0007_roles.sql): the ingest reads whether a user exists (its user
-- id, nothing else) and records refusals, updating only what a retry changes; the
-- operator reads them.
GRANT SELECT (user_id) ON users TO paystream_ingest;
GRANT SELECT, INSERT ON refused_deliveries TO paystream_ingest;
GRANT UPDATE (user_id, detail, trace_id, event, last_refused_at, attempts)
    ON refused_deliveries TO paystream_ingest;
GRANT SELECT ON refused_deliveries TO paystream_ops;
