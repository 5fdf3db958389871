-- One database role per process (issue 13). The owner (`paystream`) owns the database
-- and every table and runs these migrations; no long-running process logs in as it.
-- Each login role is granted exactly what its component's SQL does (read the component
-- before widening a grant; a migration that adds a table must grant it here-style too).
-- `paystream stack up` creates the roles as LOGIN with generated passwords before the
-- migrations run (stack/postgres.py); a role still missing here (a Postgres run
-- elsewhere whose owner may create roles) is created NOLOGIN, for the DBA to enable.
--
-- Derived from:
--   ingest   schema/outbox.py, ingest/recording.py, ingest/alchemy.py (+ store.py: SELECT 1)
--   ledger   consumers/ledger.py, schema/{processed_events,chain_deposits,status,
--            stored_events,outbox,pgcopy}.py, consumers/ledger_{reconcile,metrics}.py
--   mirror   consumers/dlq_mirror.py, schema/{status,stored_events}.py
--   finality finality/store.py, schema/chain_deposits.py (decide, mark_*), schema/outbox.py
--   ops      ops/{health,housekeeping,replay,shortfalls}.py, ingest/admin.py (users,
--            addresses, balances), consumers/ledger_reconcile.py (paystream reconcile)
--   cdc      connectors/config/outbox-connector.json (the outbox, the heartbeat upsert)
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['paystream_ingest', 'paystream_ledger', 'paystream_mirror',
                             'paystream_finality', 'paystream_ops', 'paystream_cdc'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
    -- PUBLIC may neither connect nor create temporary tables: only the roles below.
    EXECUTE format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO paystream_ingest, paystream_ledger,'
                   ' paystream_mirror, paystream_finality, paystream_ops, paystream_cdc',
                   current_database());
    -- The ledger stages its COPY of idempotency keys in a temporary table
    -- (schema/processed_events.py, processed_events_in).
    EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO paystream_ledger', current_database());
END
$$;

REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO paystream_ingest, paystream_ledger, paystream_mirror,
    paystream_finality, paystream_ops, paystream_cdc;

-- ingest: an accepted delivery is its payment_events row + an outbox row inserted and
-- deleted in one transaction, or an ingest_notices row; it reads the deposit addresses
-- and, on a redelivery, the stored event.
GRANT SELECT, INSERT ON payment_events, ingest_notices TO paystream_ingest;
GRANT SELECT ON deposit_addresses TO paystream_ingest;
GRANT SELECT, INSERT, DELETE ON outbox TO paystream_ingest;

-- ledger: the money. Balances are inserted (user, asset) and then only their amounts
-- change; the journals, idempotency keys, chain deposits and shortfalls are inserted;
-- an event's status and a deposit's settlement columns are updated; notifications go
-- through the outbox.
GRANT SELECT ON users TO paystream_ledger;
GRANT SELECT, INSERT (user_id, asset) ON balances TO paystream_ledger;
GRANT UPDATE (balance, pending, updated_at) ON balances TO paystream_ledger;
GRANT SELECT, UPDATE (status, status_changed_at) ON payment_events TO paystream_ledger;
GRANT SELECT, INSERT ON balance_events, pending_events TO paystream_ledger;
GRANT USAGE ON SEQUENCE balance_events_id_seq, pending_events_id_seq TO paystream_ledger;
GRANT SELECT, INSERT ON processed_events TO paystream_ledger;
GRANT UPDATE (outcome) ON processed_events TO paystream_ledger;
GRANT SELECT, INSERT ON chain_deposits TO paystream_ledger;
GRANT UPDATE (state, credited_at, settled_at, final_block_number, final_block_hash,
              final_log_index, verdict_reason) ON chain_deposits TO paystream_ledger;
GRANT SELECT, INSERT ON account_shortfalls TO paystream_ledger;
GRANT USAGE ON SEQUENCE account_shortfalls_id_seq TO paystream_ledger;
GRANT SELECT, INSERT, DELETE ON outbox TO paystream_ledger;

-- mirror (dlq-mirror): its table, upserted, and the mirrored event's status.
GRANT SELECT, INSERT ON dead_letter_queue TO paystream_mirror;
GRANT UPDATE (attempts, error_reason, error_detail, last_seen_at) ON dead_letter_queue
    TO paystream_mirror;
GRANT USAGE ON SEQUENCE dead_letter_queue_id_seq TO paystream_mirror;
GRANT SELECT, UPDATE (status, status_changed_at) ON payment_events TO paystream_mirror;

-- finality: reads the open deposits and the reorg notices, writes its decision columns,
-- and emits settlement events through the outbox.
GRANT SELECT ON chain_deposits, ingest_notices TO paystream_finality;
GRANT UPDATE (state, decided_at, transfer_key, verdict_reason, final_block_number,
              final_block_hash, final_log_index, missing_since_block, suspect_reason)
    ON chain_deposits TO paystream_finality;
GRANT SELECT, INSERT, DELETE ON outbox TO paystream_finality;

-- ops: reads everything it reports on, and the operator's few writes: users and
-- deposit addresses, housekeeping's purge, a DLQ replay (the dead letter, the event's
-- status, an outbox row), a shortfall's resolution. Never the journals or balances.
GRANT SELECT ON users, balances, deposit_addresses, payment_events, outbox,
    processed_events, balance_events, pending_events, dead_letter_queue, ingest_notices,
    chain_deposits, account_shortfalls, debezium_heartbeat, schema_migrations
    TO paystream_ops;
GRANT INSERT ON users, deposit_addresses TO paystream_ops;
GRANT DELETE ON processed_events TO paystream_ops;
-- Only for the row lock of housekeeping's purge (SELECT ... FOR UPDATE SKIP LOCKED: a row
-- lock needs UPDATE on some column); it adds nothing to what DELETE already allows.
GRANT UPDATE (processed_at) ON processed_events TO paystream_ops;
GRANT UPDATE (status, last_seen_at) ON dead_letter_queue TO paystream_ops;
GRANT UPDATE (status, status_changed_at) ON payment_events TO paystream_ops;
GRANT INSERT, DELETE ON outbox TO paystream_ops;
GRANT UPDATE (resolved_at, resolution) ON account_shortfalls TO paystream_ops;

-- cdc (Debezium, REPLICATION): reads the outbox, upserts its heartbeat row.
GRANT SELECT ON outbox TO paystream_cdc;
GRANT SELECT, INSERT, UPDATE (last_beat) ON debezium_heartbeat TO paystream_cdc;
