"""Invoices: a merchant asks a user for an amount by a deadline; paystream watches the
payments arrive, settles or expires the invoice, and tells the user (docs/invoices.md).

  rules.py     the state rules (pure): an invoice's standing from its payments
  model.py     the invoice row as Python reads it; its status history line
  notices.py   the invoice.* intents a change makes (pure)
  create.py    a new invoice once per Idempotency-Key, its dedicated deposit address
               (the user's spare one or the pool's); the cancel of an unpaid one
  reads.py     one invoice with its payments and history, and pages of them (the API's
               and the operator's answers)
  matching.py  payments matched to invoices by the ledger, in the batch that applies them
  ledger_consequence.py  how the ledger's batch runs the matching (its declared
               consequence, after the chain deposits; paystream/consume.py finds it)
  expiry.py    the expiry scheduler: open invoices past their deadline, a round at a time
  operator.py  the operator's extend (a later deadline, a new reminder cycle)
  reconcile_check.py  the check `paystream reconcile` runs beside the ledger's: every
               invoice's sums are its payments', a settled one was paid
  cli.py       `paystream invoices list|show|extend|cancel|expire`

The doors that change an invoice each call these, in their own transaction: the merchant
API creates and cancels, the ledger matches payments when it applies a deposit, the
expiry scheduler expires, the operator extends and cancels; the reminder scheduler
(notify/reminders.py) reminds an unpaid invoice before its deadline.
"""
