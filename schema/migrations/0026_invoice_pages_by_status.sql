-- GET /v1/invoices?status=paid_partial|paid_over|paid_late (and `paystream invoices list
-- --status`): a page of invoices with an additional status, newest first, read from its
-- index like every other filter's (migration 0025), not by walking every invoice's
-- (created_at, invoice_id) entry and filtering. Partial: most invoices have none.
CREATE INDEX invoices_by_additional_idx
    ON invoices (additional_status, created_at DESC, invoice_id DESC)
    WHERE additional_status IS NOT NULL;
