-- Invoices (paystream.invoices, docs/invoices.md): a merchant asks a user for an amount
-- by a deadline; the ledger matches payments to it in the transaction that applies each
-- deposit, the expiry scheduler closes it when the deadline passes unpaid.
--
-- State (BTCPay's names): new -> processing -> settled | expired | invalid, with one
-- additional status beside it: paid_partial, paid_over or paid_late. The rules that move
-- it are paystream.invoices.rules (pure); every write is one of the invoices package's
-- modules, each in its caller's transaction.
CREATE TABLE invoices (
    invoice_id         TEXT PRIMARY KEY,                 -- inv_<32 hex>
    user_id            TEXT NOT NULL REFERENCES users (user_id),
    asset              TEXT NOT NULL,
    amount             NUMERIC(38, 18) NOT NULL CHECK (amount > 0),
    -- Under- or overpayment within this share of the amount still settles.
    tolerance_pct      NUMERIC(5, 2) NOT NULL DEFAULT 0
        CHECK (tolerance_pct >= 0 AND tolerance_pct < 100),
    order_id           TEXT,
    metadata           JSONB NOT NULL DEFAULT '{}'::jsonb,
    -- A chain invoice's dedicated deposit address (one invoice per address, ever: a late
    -- payment can only be this invoice's); both NULL for a gateway invoice, whose
    -- deposits name it (`invoice_id`).
    network            TEXT,
    address            TEXT,
    expires_at         TIMESTAMPTZ NOT NULL,
    state              TEXT NOT NULL DEFAULT 'new'
        CHECK (state IN ('new', 'processing', 'settled', 'expired', 'invalid')),
    additional_status  TEXT
        CHECK (additional_status IN ('paid_partial', 'paid_over', 'paid_late')),
    -- Sums of the payments below: credited (final) and seen but not final yet.
    amount_paid        NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (amount_paid >= 0),
    amount_pending     NUMERIC(38, 18) NOT NULL DEFAULT 0 CHECK (amount_pending >= 0),
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at         TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- The merchant API's idempotency: the key that made it and the request's hash.
    api_key_id         TEXT,
    idempotency_key    TEXT,
    request_hash       TEXT,
    CHECK ((network IS NULL) = (address IS NULL)),
    UNIQUE (api_key_id, idempotency_key)
);
CREATE UNIQUE INDEX invoices_address_idx ON invoices (network, address)
    WHERE address IS NOT NULL;
-- The expiry scheduler's and the reminders' question: open invoices by deadline.
CREATE INDEX invoices_open_by_deadline_idx ON invoices (expires_at)
    WHERE state IN ('new', 'processing');
-- GET /v1/invoices pages (newest first) by each filter.
CREATE INDEX invoices_by_user_idx ON invoices (user_id, created_at DESC, invoice_id DESC);
CREATE INDEX invoices_by_order_idx ON invoices (order_id, created_at DESC, invoice_id DESC)
    WHERE order_id IS NOT NULL;
CREATE INDEX invoices_by_state_idx ON invoices (state, created_at DESC, invoice_id DESC);
CREATE INDEX invoices_by_created_idx ON invoices (created_at DESC, invoice_id DESC);

-- A payment counted toward an invoice: one deposit, at most one invoice.
CREATE TABLE invoice_payments (
    event_id      TEXT PRIMARY KEY,                      -- the deposit's event id
    invoice_id    TEXT NOT NULL REFERENCES invoices (invoice_id),
    amount        NUMERIC(38, 18) NOT NULL CHECK (amount > 0),
    state         TEXT NOT NULL CHECK (state IN ('pending', 'credited', 'reorged',
                                                 'reversed')),
    -- When the payment was made (the provider's time, the block's for the scanner):
    -- on or before the invoice's expires_at it counts on time, after it is paid late.
    seen_at       TIMESTAMPTZ NOT NULL,
    late          BOOLEAN NOT NULL,
    recorded_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    credited_at   TIMESTAMPTZ
);
CREATE INDEX invoice_payments_by_invoice_idx ON invoice_payments (invoice_id, recorded_at);

-- Every state or additional-status change, with its time and what caused it.
CREATE TABLE invoice_history (
    id                 BIGSERIAL PRIMARY KEY,
    invoice_id         TEXT NOT NULL REFERENCES invoices (invoice_id),
    state              TEXT NOT NULL,
    additional_status  TEXT,
    expires_at         TIMESTAMPTZ NOT NULL,
    cause              TEXT NOT NULL,   -- created, payment:<event id>, expired, extended, ...
    at                 TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX invoice_history_by_invoice_idx ON invoice_history (invoice_id, id);

-- Addresses the operator loads (`paystream addresses add --pool`) for chain invoices of
-- users without a spare address of their own: taken once, by one invoice, and then the
-- user's deposit address (deposit_addresses) for good.
CREATE TABLE deposit_address_pool (
    network      TEXT NOT NULL,
    address      TEXT NOT NULL,
    added_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    taken_by     TEXT REFERENCES invoices (invoice_id),
    taken_at     TIMESTAMPTZ,
    PRIMARY KEY (network, address)
);
CREATE INDEX deposit_address_pool_free_idx ON deposit_address_pool (network, added_at)
    WHERE taken_by IS NULL;

-- A reminder whose moment passed while nothing ran (past its window) is claimed as
-- skipped (no intent, counted), never sent late.
ALTER TABLE notification_reminders ALTER COLUMN intent_id DROP NOT NULL;
ALTER TABLE notification_reminders ADD COLUMN skipped BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE notification_reminders ADD CONSTRAINT notification_reminders_skipped_check
    CHECK (skipped = (intent_id IS NULL));

-- Least privilege.
-- The merchant API creates invoices (taking a pool address, adding it to the user's),
-- reads them, and cancels an unpaid one; its invoice.created intent goes through the
-- outbox it already writes.
GRANT SELECT, INSERT ON invoices, invoice_history TO paystream_api;
GRANT UPDATE (state, additional_status, updated_at) ON invoices TO paystream_api;
GRANT USAGE ON SEQUENCE invoice_history_id_seq TO paystream_api;
GRANT SELECT ON invoice_payments TO paystream_api;
GRANT SELECT, UPDATE (taken_by, taken_at) ON deposit_address_pool TO paystream_api;
-- The ledger matches payments in the transaction that applies each deposit.
GRANT SELECT, UPDATE (state, additional_status, amount_paid, amount_pending, updated_at)
    ON invoices TO paystream_ledger;
GRANT SELECT, INSERT, UPDATE (state, credited_at) ON invoice_payments TO paystream_ledger;
GRANT INSERT ON invoice_history TO paystream_ledger;
GRANT USAGE ON SEQUENCE invoice_history_id_seq TO paystream_ledger;
-- The operator: lists and shows, extends and cancels; the expiry scheduler (ops role,
-- like the hold expiry) expires; `addresses add --pool` loads the pool.
GRANT SELECT ON invoices, invoice_payments, invoice_history, deposit_address_pool
    TO paystream_ops;
GRANT UPDATE (state, additional_status, expires_at, updated_at) ON invoices TO paystream_ops;
GRANT INSERT ON invoice_history TO paystream_ops;
GRANT USAGE ON SEQUENCE invoice_history_id_seq TO paystream_ops;
GRANT INSERT ON deposit_address_pool TO paystream_ops;
-- The reminder scheduler: unpaid invoices by deadline; it claims skipped reminders too.
GRANT SELECT (invoice_id, user_id, asset, amount, amount_paid, state, expires_at,
              created_at, order_id) ON invoices TO paystream_notifier;
