-- An event's status in a narrow table of its own; payment_events is insert-only.
--
-- The ledger moves every event's status once (schema/status.py transition()). On
-- payment_events that was a non-HOT update of a ~430-byte row with four indexes (its
-- primary key, the stuck-events index, the console's trace and user indexes): 30-43 µs
-- of Postgres CPU per event. Here the update writes a row of a few dozen bytes with one
-- index entry (the primary key; the stuck-events index only takes `received` rows).
--
-- Every writer of payment_events inserts the event's `received` row here in the same
-- statement (schema/outbox.py), so every payment_events row has its status row; nothing
-- deletes payment_events rows in the pipeline, the cascade is for the tests' and
-- benchmarks' clean-ups (a status row means nothing without its event).
--
-- One transaction holding payment_events exclusively from the copy of every row's status
-- to the drop of the columns (a time proportional to the table), so no event inserted
-- in between is left without its status row. The previous release reads and writes
-- payment_events.status: stop its processes before migrating, start this one's after.
LOCK TABLE payment_events IN ACCESS EXCLUSIVE MODE;

CREATE TABLE event_status (
    event_id          TEXT PRIMARY KEY REFERENCES payment_events (event_id) ON DELETE CASCADE,
    -- The lifecycle is schema/status.py's EventStatus (its ALLOWED_TRANSITIONS).
    status            TEXT NOT NULL DEFAULT 'received'
        CHECK (status IN ('received', 'pending_finality', 'credited', 'applied', 'rejected',
                          'dead_lettered', 'reorged', 'reversed')),
    status_changed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

INSERT INTO event_status (event_id, status, status_changed_at)
    SELECT event_id, status, status_changed_at FROM payment_events;

-- The stuck-events check (ops/health.py): how many events have waited in `received`
-- longer than a threshold, and the oldest wait, both by status_changed_at (a DLQ replay
-- makes an old event `received` again; its wait starts then). Read from this index
-- alone: it holds only the received rows, so it stays small whatever the history.
CREATE INDEX event_status_received_idx ON event_status (status_changed_at)
    WHERE status = 'received';

DROP INDEX payment_events_received_idx;
ALTER TABLE payment_events DROP CONSTRAINT payment_events_status_check;
-- Dropping a column also drops its column grants (the UPDATE (status,
-- status_changed_at) of 0007): no role may update payment_events any more.
ALTER TABLE payment_events DROP COLUMN status, DROP COLUMN status_changed_at;

-- Least privilege (0007_roles.sql): who moved payment_events' status moves it here
-- (ledger, dlq-mirror, the operator's replay); who inserts payment_events inserts the
-- status row with it (ingest, the chain scanner as finality, the API's withdrawals, the
-- operator's events); who read the status reads it here (the API, the operator). The
-- ingest and the chain scanner never read a status: INSERT only.
GRANT SELECT, UPDATE (status, status_changed_at) ON event_status
    TO paystream_ledger, paystream_mirror;
GRANT SELECT, INSERT, UPDATE (status, status_changed_at) ON event_status TO paystream_ops;
GRANT SELECT, INSERT ON event_status TO paystream_api;
GRANT INSERT ON event_status TO paystream_ingest, paystream_finality;
