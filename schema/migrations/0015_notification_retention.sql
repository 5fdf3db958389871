-- Housekeeping forgets notifications that are done (schema/notification_slots.py
-- purge_final, run by `paystream housekeeping` as the ops role): intents recorded before
-- a TTL whose every delivery is final, with their deliveries and attempts. The index
-- lets each batch take the oldest ones without sorting the table.
CREATE INDEX notification_intents_recorded_idx ON notification_intents (recorded_at);

GRANT DELETE ON notification_intents, notification_deliveries, notification_attempts
    TO paystream_ops;
