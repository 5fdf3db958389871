-- A user's history page (GET /v1/users/{id}/transactions) reads, per account, the newest
-- postings below the cursor: with postings indexed by account alone it read and sorted
-- the account's whole history for every page (21-31 ms a page at 50,000 postings, so
-- paging through was quadratic). With transfer_id in the key each account's page is
-- the end of one index range. The index replaces the old one (its prefix serves what
-- that served: reconcile's and balances-at's postings by account). Its price on the
-- ledger's insert: docs/benchmarks.md#read-paths.
CREATE INDEX postings_account_transfer_idx ON postings (account_id, transfer_id);
DROP INDEX postings_account_idx;
