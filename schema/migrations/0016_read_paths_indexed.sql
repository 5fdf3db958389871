-- Read paths that scanned whole tables: an audit of every request, loop and routine
-- command with EXPLAIN ANALYZE on tables of 500,000-1,000,000 rows (2026-12-03,
-- figures in docs/benchmarks.md#read-paths). None of these tables is written by the
-- ledger's batch path except chain_deposits' state moves, so none costs it an insert.

-- The finality watcher's backlog and credited counts and the health check ask for the
-- unsettled deposits of a network; the two partial indexes covered neither's states,
-- so each 1 s tick scanned every deposit ever recorded (380 + 250 ms at 1 M). One
-- index over all seven unsettled states serves them and the old indexes' queries.
CREATE INDEX chain_deposits_unsettled_idx ON chain_deposits (network, block_number)
    WHERE state IN ('pending', 'suspect', 'crediting', 'credited', 'finalizing',
                    'reorging', 'reversing');
DROP INDEX chain_deposits_open_idx;
DROP INDEX chain_deposits_credited_idx;

-- GET /v1/users/{id}/deposit-addresses (50-134 ms at 500,000 addresses, unknown users too).
CREATE INDEX deposit_addresses_user_idx ON deposit_addresses (user_id, created_at);

-- Housekeeping's notification purge asks, per intent, whether a reminder names it (and
-- the foreign key asks again on every delete): 717 -> 71 ms a batch of 1,000.
CREATE INDEX notification_reminders_intent_idx ON notification_reminders (intent_id);

-- `paystream holds list` reads the open holds (held or expiring); the expiry claim reads
-- held ones: one partial index for both (holds are never deleted).
CREATE INDEX holds_open_idx ON holds (expires_at) WHERE state IN ('held', 'expiring');
DROP INDEX holds_expiry_idx;

-- The health check counts the last hour's dead letters; the table is never purged.
CREATE INDEX dead_letter_queue_first_seen_idx ON dead_letter_queue (first_seen_at);
