-- Holds (two-phase withdrawals), refunds, chargebacks, operator adjustments and reverts
-- (issue 14 items 3 and 4). The ledger owns both tables; the hold expiry scheduler
-- (ops/holds.py) only claims expired holds (held -> expiring) in the transaction that
-- writes their hold_expired event through the outbox.

ALTER TABLE payment_events DROP CONSTRAINT payment_events_event_type_check;
ALTER TABLE payment_events ADD CONSTRAINT payment_events_event_type_check
    CHECK (event_type IN ('deposit', 'airdrop', 'withdrawal', 'withdrawal_fee',
                          'withdrawal_requested', 'withdrawal_settled', 'withdrawal_failed',
                          'hold_expired', 'refund', 'chargeback', 'revert',
                          'adjustment_credit', 'adjustment_debit'));

-- New final outcomes, each a rejection (status rejected, no money moved):
--   hold_not_open     a settle, failure or expiry of a hold that is not open (never
--                     placed, another user's or asset's, or settled / voided already)
--   exceeds_hold      a settlement of more than the hold's amount or fee
--   invalid_reversal  a reversal of an event it may not reverse (unknown, not applied,
--                     another user's or asset's, a type that cannot be reversed)
--   exceeds_original  a reversal of more than the original minus earlier reversals
ALTER TABLE processed_events DROP CONSTRAINT processed_events_outcome_check;
ALTER TABLE processed_events ADD CONSTRAINT processed_events_outcome_check
    CHECK (outcome IN ('applied', 'insufficient_funds', 'pending_finality', 'reorged',
                       'credited', 'reversed', 'shortfall', 'account_flagged',
                       'hold_not_open', 'exceeds_hold', 'invalid_reversal',
                       'exceeds_original'));

-- One row per hold a withdrawal_requested placed: amount + fee moved from the user's
-- available to held. Closed once: settled (the gateway paid it out), failed (it did
-- not), expired (nobody said anything before expires_at).
CREATE TABLE holds (
    hold_id        TEXT PRIMARY KEY,            -- the withdrawal_requested event id
    user_id        TEXT NOT NULL,
    asset          TEXT NOT NULL,
    provider       TEXT NOT NULL,
    amount         NUMERIC(38, 18) NOT NULL CHECK (amount > 0),
    fee            NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (fee >= 0),
    state          TEXT NOT NULL DEFAULT 'held'
        CHECK (state IN ('held', 'expiring', 'settled', 'failed', 'expired')),
    expires_at     TIMESTAMPTZ NOT NULL,
    closed_by      TEXT,                        -- the event that closed it
    settled_amount NUMERIC(38, 18),
    settled_fee    NUMERIC(38, 18),
    created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    closed_at      TIMESTAMPTZ,
    FOREIGN KEY (user_id, asset) REFERENCES balances (user_id, asset)
);
CREATE INDEX holds_expiry_idx ON holds (expires_at) WHERE state = 'held';

-- The transitions, enforced here whoever writes: held -> expiring (the scheduler's
-- claim), held | expiring -> settled | failed | expired (the ledger), nothing after.
CREATE FUNCTION holds_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = OLD.state THEN
        RETURN NEW;
    END IF;
    IF OLD.state = 'held' AND NEW.state IN ('expiring', 'settled', 'failed', 'expired')
       OR OLD.state = 'expiring' AND NEW.state IN ('settled', 'failed', 'expired') THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'hold %: % -> % is not a transition', OLD.hold_id, OLD.state, NEW.state
        USING ERRCODE = 'check_violation';
END
$$;
CREATE TRIGGER holds_transition BEFORE UPDATE OF state ON holds
    FOR EACH ROW EXECUTE FUNCTION holds_transition();

-- One row per applied refund, chargeback or revert: what it took back of which event.
-- The sum per `reverses` never exceeds the original's amount (the ledger checks it
-- under the balance row's lock; reconcile can re-check it).
CREATE TABLE event_reversals (
    event_id   TEXT PRIMARY KEY,
    reverses   TEXT NOT NULL,
    amount     NUMERIC(38, 18) NOT NULL CHECK (amount > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX event_reversals_reverses_idx ON event_reversals (reverses);

-- === Grants (the pattern of 0007) =====================================================
GRANT SELECT, INSERT ON holds, event_reversals TO paystream_ledger;
GRANT UPDATE (state, closed_by, settled_amount, settled_fee, closed_at) ON holds
    TO paystream_ledger;
-- ops: the expiry scheduler's claim and the operator's events (adjust, revert, expiry)
-- recorded as the ingest records a delivery: payment_events + outbox.
GRANT SELECT ON holds, event_reversals TO paystream_ops;
GRANT UPDATE (state) ON holds TO paystream_ops;
GRANT INSERT ON payment_events TO paystream_ops;
