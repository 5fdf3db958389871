-- `paystream notifications list --state failed` and `recover --since T` look for the
-- deliveries that failed for good: without an index each scanned every delivery ever
-- made (188-315 ms at 2 M). Only a delivery entering `failed` gets an entry; the
-- notifier's other updates already change `state`, which the due index's predicate
-- names, so none of them was a HOT update before this index either.
CREATE INDEX notification_deliveries_failed_idx ON notification_deliveries (created_at)
    WHERE state = 'failed';
