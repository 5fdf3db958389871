-- 0033's constraints, validated in their own transaction: a validation holds SHARE
-- UPDATE EXCLUSIVE (reads and writes go on) while it scans users.
ALTER TABLE users VALIDATE CONSTRAINT users_merchant_fk;
ALTER TABLE api_keys VALIDATE CONSTRAINT api_keys_merchant_fk;
ALTER TABLE api_keys VALIDATE CONSTRAINT api_keys_scopes_known;
ALTER TABLE notification_endpoints VALIDATE CONSTRAINT notification_endpoints_merchant_fk;
