-- Double-entry ledger (issue 14). Money lives in ACCOUNTS; every applied event that moves
-- money writes one TRANSFER whose POSTINGS sum to zero per asset. The per-(user, asset)
-- balances row stays as a derived copy of the user's three accounts, locked by the
-- ledger for speed: balance = available, pending = chain deposits before finality,
-- held = withdrawals in flight. `paystream reconcile` proves both (consumers/
-- ledger_reconcile.py, consumers/ledger_conservation.py).
--
-- Sign: a posting's amount is signed; an account's balance is the sum of its postings.
-- User accounts (what the platform owes its users) carry positive sums; the platform's
-- counter-accounts carry the other side: custody (what the deposit addresses of a
-- network hold) and settlement (what a gateway owes) are negative by as much as they
-- hold or are owed. Which event posts what: consumers/ledger_postings.py.

CREATE TABLE accounts (
    account_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN (
        'available', 'pending', 'held',         -- per user and asset (owner = user id)
        'custody',                              -- per network and asset (owner = network)
        'settlement',                           -- per provider and asset (owner = provider)
        'fees', 'receivable', 'opening', 'adjustments')),  -- owner = 'platform'
    owner      TEXT NOT NULL CHECK (length(owner) BETWEEN 1 AND 200),
    asset      TEXT NOT NULL CHECK (length(asset) BETWEEN 1 AND 200),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (kind, owner, asset)
);
-- A user's accounts by user (balances at a point in time, the API's history).
CREATE INDEX accounts_owner_idx ON accounts (owner, asset);

-- One transfer per (source event, event type): the last line of defence against a
-- second effect of one event, as balance_events' UNIQUE was. Ids come from the sequence
-- (the ledger takes a batch's ids with one nextval() query and COPYs both tables).
CREATE TABLE transfers (
    transfer_id     BIGSERIAL PRIMARY KEY,
    source_event_id TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (source_event_id, event_type)
);

-- No foreign keys to transfers and accounts: they cost the ledger ~40 % of its rate
-- (shared/bench/double_entry_ceiling.py, --fk). reconcile checks that every posting has
-- its transfer and account, and the account's asset. The primary key makes a transfer
-- post to an account at most once, and indexes postings by transfer.
CREATE TABLE postings (
    transfer_id BIGINT NOT NULL,
    account_id  BIGINT NOT NULL,
    asset       TEXT NOT NULL,
    amount      NUMERIC(38, 18) NOT NULL CHECK (amount <> 0),
    PRIMARY KEY (transfer_id, account_id)
);
CREATE INDEX postings_account_idx ON postings (account_id);

-- Withdrawals in flight (holds, issue 14 item 3) will move money here.
ALTER TABLE balances ADD COLUMN held NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (held >= 0);

-- === The v1 journal becomes transfers ==================================================
-- Each (source event, event type) of balance_events and pending_events is one transfer,
-- at the time of its first row, posting each row's delta to the user's account of that
-- book. What balances it: a chain deposit's custody (the deposit itself, its reorg, its
-- reversal, as the v2 ledger posts them), or for everything else the `opening` account
-- of the asset: the money that was on the books when the journal was single-sided.

INSERT INTO accounts (kind, owner, asset)
SELECT k.kind, b.user_id, b.asset
FROM balances b CROSS JOIN (VALUES ('available'), ('pending'), ('held')) AS k(kind)
ORDER BY b.user_id, b.asset, k.kind;

INSERT INTO accounts (kind, owner, asset)
SELECT DISTINCT 'custody', network, asset FROM chain_deposits
UNION SELECT DISTINCT 'opening', 'platform', asset FROM balances
UNION SELECT DISTINCT 'receivable', 'platform', asset FROM account_shortfalls
ON CONFLICT (kind, owner, asset) DO NOTHING;

CREATE TEMPORARY TABLE v1_journal ON COMMIT DROP AS
SELECT source_event_id, event_type, user_id, asset, delta, created_at, 'available' AS kind
FROM balance_events
UNION ALL
SELECT source_event_id, event_type, user_id, asset, delta, created_at, 'pending'
FROM pending_events;

-- A reversal that took nothing left no journal row; its transfer still moves custody
-- and the receivable, so it is added here.
INSERT INTO transfers (source_event_id, event_type, created_at)
SELECT source_event_id, event_type, min(created_at) FROM (
    SELECT source_event_id, event_type, created_at FROM v1_journal
    UNION ALL
    SELECT event_id || ':reversed', 'deposit_reversed', coalesce(settled_at, recorded_at)
    FROM chain_deposits WHERE state = 'reversed'
) AS j
GROUP BY source_event_id, event_type
ORDER BY min(created_at), source_event_id, event_type;

INSERT INTO postings (transfer_id, account_id, asset, amount)
SELECT t.transfer_id, a.account_id, j.asset, sum(j.delta)
FROM v1_journal j
JOIN transfers t USING (source_event_id, event_type)
JOIN accounts a ON a.kind = j.kind AND a.owner = j.user_id AND a.asset = j.asset
GROUP BY t.transfer_id, a.account_id, j.asset
HAVING sum(j.delta) <> 0;

-- The deposit each chain transfer belongs to.
CREATE TEMPORARY TABLE v1_chain ON COMMIT DROP AS
SELECT t.transfer_id, t.event_type, d.event_id, d.network, d.asset, d.amount
FROM transfers t
JOIN chain_deposits d ON d.event_id = CASE t.event_type
    WHEN 'deposit' THEN t.source_event_id
    WHEN 'deposit_reorged' THEN left(t.source_event_id, -length(':reorged'))
    WHEN 'deposit_reversed' THEN left(t.source_event_id, -length(':reversed'))
END;

-- Reversals: custody gets the whole amount back, the receivable what was not taken.
INSERT INTO postings (transfer_id, account_id, asset, amount)
SELECT c.transfer_id, a.account_id, c.asset, c.amount
FROM v1_chain c JOIN accounts a ON a.kind = 'custody' AND a.owner = c.network
                               AND a.asset = c.asset
WHERE c.event_type = 'deposit_reversed';
INSERT INTO postings (transfer_id, account_id, asset, amount)
SELECT c.transfer_id, a.account_id, c.asset, -s.amount
FROM v1_chain c
JOIN account_shortfalls s ON s.source_event_id = c.event_id || ':reversed'
JOIN accounts a ON a.kind = 'receivable' AND a.owner = 'platform' AND a.asset = c.asset
WHERE c.event_type = 'deposit_reversed';

-- Every other transfer that does not sum to zero: its counter-posting.
INSERT INTO postings (transfer_id, account_id, asset, amount)
SELECT s.transfer_id, a.account_id, s.asset, -s.total
FROM (SELECT p.transfer_id, p.asset, sum(p.amount) AS total FROM postings p
      GROUP BY p.transfer_id, p.asset HAVING sum(p.amount) <> 0) AS s
LEFT JOIN v1_chain c ON c.transfer_id = s.transfer_id
JOIN accounts a ON a.asset = s.asset AND (
    (c.transfer_id IS NOT NULL AND a.kind = 'custody' AND a.owner = c.network)
    OR (c.transfer_id IS NULL AND a.kind = 'opening' AND a.owner = 'platform'))
WHERE c.event_type IS DISTINCT FROM 'deposit_reversed';

DROP TABLE balance_events, pending_events;

-- A user's statement: every posting to a user account, with its source event. For
-- operators, the tests and the merchant API; it writes nothing.
CREATE VIEW user_entries AS
SELECT a.owner AS user_id, a.asset, a.kind AS book, p.amount AS delta,
       t.source_event_id, t.event_type, t.transfer_id, t.created_at
FROM postings p
JOIN accounts a ON a.account_id = p.account_id
JOIN transfers t ON t.transfer_id = p.transfer_id
WHERE a.kind IN ('available', 'pending', 'held');

-- === Grants (the pattern of 0007) =====================================================
-- ledger: creates accounts, writes transfers and postings, moves held.
GRANT SELECT, INSERT (kind, owner, asset) ON accounts TO paystream_ledger;
GRANT SELECT, INSERT ON transfers, postings TO paystream_ledger;
GRANT USAGE ON SEQUENCE transfers_transfer_id_seq TO paystream_ledger;
GRANT UPDATE (held) ON balances TO paystream_ledger;
-- ops: reads the books (reconcile, balances at a point in time).
GRANT SELECT ON accounts, transfers, postings, user_entries TO paystream_ops;
