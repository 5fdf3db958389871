-- A refund, chargeback or operator revert of a deposit that paid an invoice takes its
-- amount back from the invoice too (paystream.invoices.matching, in the ledger's
-- transaction): `refunded` is how much of the payment was taken back; a payment taken
-- back whole is `reversed`. The invoice counts amount - refunded of each credited one.
ALTER TABLE invoice_payments ADD COLUMN refunded NUMERIC(38, 18) NOT NULL DEFAULT 0
    CHECK (refunded >= 0 AND refunded <= amount);
GRANT UPDATE (refunded) ON invoice_payments TO paystream_ledger;
