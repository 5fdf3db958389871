"""What an invoice's change tells its user: the invoice.* intents (pure).

Every door that changes an invoice (the API's creation and cancel, the ledger's
payment, the expiry scheduler, the operator) asks here which intents its change makes,
and writes them in the transaction that made the change (schema.outbox, through
notify.intents.outbox_batches), so an intent exists exactly when its change committed.
Ids are stable (notify.intents.intent_id): an invoice-level change is sourced on the
invoice's id (one `invoice.settled` per invoice, whoever replays it), what one payment
did (paid_partial, paid_late) on that payment's event id.
"""

from __future__ import annotations

from decimal import Decimal

from paystream.invoices.model import Invoice
from paystream.invoices.rules import Additional, State, amount_due
from paystream.notify.intents import Intent, IntentType, new_intent
from paystream.schema.amounts import format_amount

EVENT_TYPE = "invoice"
_OF_STATE = {State.PROCESSING: IntentType.INVOICE_PROCESSING,
             State.SETTLED: IntentType.INVOICE_SETTLED,
             State.EXPIRED: IntentType.INVOICE_EXPIRED,
             State.INVALID: IntentType.INVOICE_INVALID}
_OF_ADDITIONAL = {Additional.PAID_PARTIAL: IntentType.INVOICE_PAID_PARTIAL,
                  Additional.PAID_LATE: IntentType.INVOICE_PAID_LATE}


def _intent(kind: IntentType, source: str, invoice: Invoice, created_at: str,
            payment_event_id: str | None = None) -> Intent:
    return new_intent(
        kind, source, invoice.user_id, event_type=EVENT_TYPE, asset=invoice.asset,
        amount=invoice.amount, created_at=created_at, invoice_id=invoice.invoice_id,
        state=invoice.state.value,
        additional_status=invoice.additional.value if invoice.additional else None,
        amount_paid=_text(invoice.amount_paid),
        amount_due=_text(amount_due(invoice.amount, invoice.amount_paid)),
        expires_at=invoice.expires_at.isoformat(), order_id=invoice.order_id,
        payment_event_id=payment_event_id)


def _text(amount: Decimal) -> str:
    return format_amount(amount) if amount > 0 else "0"


def created(invoice: Invoice, created_at: str) -> Intent:
    return _intent(IntentType.INVOICE_CREATED, invoice.invoice_id, invoice, created_at)


def of_change(before: Invoice, after: Invoice, created_at: str,
              payment_event_id: str | None = None) -> list[Intent]:
    """The intents `before` -> `after` makes: one for a new state, one for a new
    paid_partial or paid_late (sourced on the payment that made it, if one did)."""
    made: list[Intent] = []
    kind = _OF_STATE.get(after.state)
    if after.state is not before.state and kind is not None:
        made.append(_intent(kind, after.invoice_id, after, created_at, payment_event_id))
    extra = _OF_ADDITIONAL.get(after.additional) if after.additional else None
    if extra is not None and (after.additional is not before.additional
                              or payment_event_id is not None):
        source = payment_event_id or after.invoice_id
        made.append(_intent(extra, source, after, created_at, payment_event_id))
    return made
