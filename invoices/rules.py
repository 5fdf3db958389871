"""An invoice's standing from its payments: the one owner of the state rules (pure).

  state        new -> processing -> settled | expired | invalid (BTCPay's names)
  additional   paid_partial | paid_over | paid_late | none, beside the state

A payment counts on time when it was made (seen_at: the provider's time, the block's
for the chain scanner) on or before the deadline and the invoice was not cancelled;
otherwise it is late. Money is never refused: a late payment credits the user like any
deposit and only marks the invoice `paid_late`.

  on-time credited >= amount - tolerance      settled  (paid_over past amount + tolerance)
  else a payment seen, not final yet          processing (paid_partial if the seen sum
                                              still falls short)
  else deadline passed                        expired  (paid_late if a late payment was
                                              credited, paid_partial if an on-time one)
  else                                        new      (paid_partial if one was credited)
  cancelled (invalid)                         stays invalid (paid_late if paid after)
  settled, then its on-time credited money    invalid (paid_partial if some still counts,
  reversed below amount - tolerance           paid_late if only late money is left)

An expired invoice is not final: a payment made before the deadline that reaches the
ledger after the expiry still wins (it moves the invoice on), so the scheduler may expire
eagerly and the ledger's word is the last one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, localcontext
from enum import StrEnum

from paystream.schema.amounts import EXACT_CONTEXT

ZERO = Decimal(0)
HUNDRED = Decimal(100)


class State(StrEnum):
    NEW = "new"
    PROCESSING = "processing"
    SETTLED = "settled"
    EXPIRED = "expired"
    INVALID = "invalid"

    @property
    def is_open(self) -> bool:
        """Still waiting for its money: it expires, it is reminded, it may be cancelled."""
        return self in (State.NEW, State.PROCESSING)


class Additional(StrEnum):
    PAID_PARTIAL = "paid_partial"
    PAID_OVER = "paid_over"
    PAID_LATE = "paid_late"


@dataclass(frozen=True)
class Payments:
    """An invoice's payments summed by kind."""

    credited_on_time: Decimal = ZERO
    pending_on_time: Decimal = ZERO
    credited_late: Decimal = ZERO


@dataclass(frozen=True)
class Standing:
    state: State
    additional: Additional | None


def bounds(amount: Decimal, tolerance_pct: Decimal) -> tuple[Decimal, Decimal]:
    """(least that settles, most that settles without paid_over)."""
    with localcontext(EXACT_CONTEXT):
        margin = amount * tolerance_pct / HUNDRED
        return amount - margin, amount + margin


def standing(amount: Decimal, tolerance_pct: Decimal, paid: Payments, *,
             deadline_passed: bool, cancelled: bool, was_settled: bool = False) -> Standing:
    """What the invoice is, given its payments (see the module's table). `was_settled`:
    it was settled before this change (a reversal of its money then makes it invalid:
    the merchant was told it was paid)."""
    least, most = bounds(amount, tolerance_pct)
    with localcontext(EXACT_CONTEXT):
        total_credited = paid.credited_on_time + paid.credited_late
        seen_on_time = paid.credited_on_time + paid.pending_on_time
    if cancelled or (was_settled and paid.credited_on_time < least):
        # Invalid stays invalid (`cancelled`: its state before this change): money paid
        # after it is late; money still credited from before it (a settled invoice
        # refunded in part) leaves it partly paid.
        if paid.credited_late > ZERO:
            return Standing(State.INVALID, Additional.PAID_LATE)
        return Standing(State.INVALID,
                        Additional.PAID_PARTIAL if paid.credited_on_time > ZERO else None)
    if paid.credited_on_time >= least:
        return Standing(State.SETTLED,
                        Additional.PAID_OVER if total_credited > most else None)
    if paid.pending_on_time > ZERO:
        return Standing(State.PROCESSING,
                        Additional.PAID_PARTIAL if seen_on_time < least else None)
    partial = Additional.PAID_PARTIAL if paid.credited_on_time > ZERO else None
    if deadline_passed:
        return Standing(State.EXPIRED,
                        Additional.PAID_LATE if paid.credited_late > ZERO else partial)
    return Standing(State.NEW, partial)


def is_late(seen_at: datetime, expires_at: datetime, cancelled: bool) -> bool:
    """Whether a payment made at `seen_at` counts late for the invoice."""
    return cancelled or seen_at > expires_at


def amount_due(amount: Decimal, credited_on_time: Decimal) -> Decimal:
    """What is still owed (never below zero)."""
    with localcontext(EXACT_CONTEXT):
        return max(amount - credited_on_time, ZERO)
