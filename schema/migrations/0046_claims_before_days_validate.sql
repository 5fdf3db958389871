-- migrate: autocommit
-- Expand, step 2 of 3: validate 0045's bound (a scan under SHARE UPDATE EXCLUSIVE, which
-- lets the ledger claim), so 0047's ATTACH PARTITION need not scan the claims under its
-- exclusive lock. Validating a valid constraint again is a no-op, so the statement can
-- be rerun after a failure part way.
-- squawk-ignore prefer-robust-stmts
ALTER TABLE processed_events VALIDATE CONSTRAINT processed_events_before_days;
