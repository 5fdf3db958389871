-- migrate: autocommit
-- Expand, step 2 of 3: validate 0037's bound (a scan under SHARE UPDATE EXCLUSIVE, which
-- lets the notifier insert), so 0039's ATTACH PARTITION need not scan the table under
-- its exclusive lock. Validating a valid constraint again is a no-op, so the statement
-- can be rerun after a failure part way.
-- squawk-ignore prefer-robust-stmts
ALTER TABLE notification_attempts VALIDATE CONSTRAINT notification_attempts_before_days;
