-- The reminder scheduler counts an invoice's step as skipped only if its moment came
-- after the deadline was set (created or extended): an extension's new steps already
-- past when the operator extended were never due, so they are not a skip. It reads when
-- that was from the invoice's history, nothing else of it.
GRANT SELECT (invoice_id, cause, at) ON invoice_history TO paystream_notifier;
