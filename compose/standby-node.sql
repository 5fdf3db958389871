-- docker-compose.standby.yml: node1's server settings, run once at its first start
-- (before its keeper takes it over). ALTER SYSTEM outranks the settings pg_autoctl
-- writes into postgresql.conf's include (wal_level = replica among them), and node2
-- gets the same with its pg_basebackup. The base file's `postgres -c` settings (but
-- hba_file: the pg_hba.conf copied into the data folder) and the local standby's
-- (stack/standby.py node_conf_text): tests/unit/test_compose_consistency.py.
ALTER SYSTEM SET wal_level = 'logical';
ALTER SYSTEM SET max_wal_senders = '10';
ALTER SYSTEM SET max_replication_slots = '10';
ALTER SYSTEM SET max_connections = '200';
ALTER SYSTEM SET max_wal_size = '4GB';
ALTER SYSTEM SET checkpoint_timeout = '15min';
ALTER SYSTEM SET shared_buffers = '1GB';
ALTER SYSTEM SET huge_pages = 'try';
ALTER SYSTEM SET wal_keep_size = '1GB';
ALTER SYSTEM SET shared_preload_libraries = '';
