-- Housekeeping forgets refused deliveries not retried for a month (ops/housekeeping.py):
-- a flood of refused events adds a row per distinct event, and nothing else removed them.
GRANT DELETE ON refused_deliveries TO paystream_ops;
