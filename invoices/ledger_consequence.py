"""Invoices, a consequence of the ledger's batch (consumers/ledger/consequences.py):
the batch's deposits and refunds matched to the invoices they pay (matching.py), in the
batch transaction, and the invoice.* notices handed on for the notifications to send.

Typed by what it reads (the batch as notify/ledger_consequence.py declares it), so the
ledger and this module import nothing of each other. Declared below (CONSEQUENCE):
paystream/consume.py finds it (paystream/ledger_consequences.py) and runs it after the
chain deposits.
"""

from __future__ import annotations

from paystream.invoices import matching
from paystream.ledger_consequences import Declared
from paystream.notify.ledger_consequence import Batch
from paystream.schema.db import Cursor


class InvoicePayments:
    name = "invoices"

    def write(self, cur: Cursor, batch: Batch) -> None:
        decisions = batch.plan.decisions
        batch.told.extend(matching.match(cur, [(c, c.event, o) for c, o in decisions],
                                         batch.created_at))


CONSEQUENCE = Declared("invoices", InvoicePayments, after=("chain_deposits",))
