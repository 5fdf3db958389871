-- The outbox row is deleted in the transaction that inserts it (schema/outbox.py), and
-- Debezium's Outbox Event Router drops delete events anyway. Publishing only inserts
-- (and the heartbeat's upsert updates) lets Postgres' walsender filter the deletes out
-- before they reach Kafka Connect: half the change events Debezium had to decode,
-- convert and throw away. Measured in bench/ingest_bench.py (README, ingest speed).
ALTER PUBLICATION paystream_outbox SET (publish = 'insert, update');
