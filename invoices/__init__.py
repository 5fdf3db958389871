"""Invoices: a merchant asks a user for an amount by a deadline; paystream watches the
payments arrive, settles or expires the invoice, and tells the user (docs/invoices.md).

  rules.py     the state rules (pure): an invoice's standing from its payments
  model.py     the invoice row as Python reads it; its status history line
  notices.py   the invoice.* intents a change makes (pure)
  matching.py  payments matched to invoices by the ledger, in the batch that applies them

The doors that change an invoice each call these, in their own transaction: the merchant
API creates and cancels, the ledger matches payments when it applies a deposit, the
expiry scheduler expires, the operator extends and cancels; the reminder scheduler
(notify/reminders.py) reminds an unpaid invoice before its deadline.
"""
