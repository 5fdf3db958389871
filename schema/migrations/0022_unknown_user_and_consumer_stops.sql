-- An event of a user that does not exist is a final outcome, decided from the books
-- like insufficient_funds: `unknown_user` (a rejection: status rejected, no money
-- moved, no balance row, nobody to notify). It used to be a dead letter, so one
-- provider's flood of them could trip the consumer's DLQ limit and stop the whole group.
ALTER TABLE processed_events DROP CONSTRAINT processed_events_outcome_check;
ALTER TABLE processed_events ADD CONSTRAINT processed_events_outcome_check
    CHECK (outcome IN ('applied', 'insufficient_funds', 'pending_finality', 'reorged',
                       'credited', 'reversed', 'shortfall', 'account_flagged',
                       'hold_not_open', 'exceeds_hold', 'invalid_reversal',
                       'exceeds_original', 'unknown_user'));

-- A consumer group stopped by its DLQ limit (too many unexpected failures in the
-- window: our code or schema is broken). The consumer that trips the limit commits
-- its batch up to the failure that tripped it and inserts this row; every consumer of
-- the group stays idle while it exists (one restarted by `paystream run` too) and
-- resumes once an operator deletes it (`paystream consume resume GROUP`). One row per
-- group: the first stop's cause.
CREATE TABLE consumer_stops (
    group_id    TEXT PRIMARY KEY,
    reason      TEXT NOT NULL,               -- e.g. dlq_limit_exceeded
    detail      TEXT NOT NULL,               -- what the limit counted, the first failures
    stopped_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    host        TEXT NOT NULL,               -- where the stopping process ran
    pid         INTEGER NOT NULL
);

-- Least privilege (0007_roles.sql): the consumers (consumers/stops.py) record and read
-- their group's stop; the operator lists (paystream health) and deletes (resume) them.
GRANT SELECT, INSERT ON consumer_stops TO paystream_ledger, paystream_mirror,
    paystream_notifier;
GRANT SELECT, DELETE ON consumer_stops TO paystream_ops;
