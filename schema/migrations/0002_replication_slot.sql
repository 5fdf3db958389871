-- migrate: autocommit
-- The logical replication slot Debezium reads. It is created here, before the
-- application writes any event, so nothing written before the connector's first start
-- is missed (the connector runs with snapshot.mode=no_data). A slot cannot be created
-- in a transaction that has written, hence autocommit. Never drop it while events may
-- be unsent: the slot is what keeps them.
SELECT pg_create_logical_replication_slot('paystream_outbox', 'pgoutput')
WHERE NOT EXISTS (
    SELECT 1 FROM pg_replication_slots WHERE slot_name = 'paystream_outbox'
);
