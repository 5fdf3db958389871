"""Money out: one-shot withdrawals and their fees, and two-phase withdrawals (holds).

A two-phase withdrawal holds its amount and fee (withdrawal_requested), then the gateway
settles it (paid out, the fee charged, the rest released) or fails it, or the expiry
scheduler expires it (consumers/ledger/operator_events.py): the three closes name the
request's event id (wire `hold_id`). Any rejection of these tells the user
`withdrawal.rejected`.
"""

from __future__ import annotations

from paystream.schema.event_types.declaration import FEES, SETTLEMENT, Shape, declare
from paystream.schema.holds import HoldState
from paystream.schema.processed_events import Outcome

REJECTED = "withdrawal.rejected"

WITHDRAWAL = declare(  # requested and settled at once
    "withdrawal", Shape.DEBIT, counter=SETTLEMENT, gateway=True,
    intents={Outcome.APPLIED: "withdrawal.applied"}, rejected_intent=REJECTED)
WITHDRAWAL_FEE = declare(
    "withdrawal_fee", Shape.DEBIT, counter=FEES, gateway=True,
    intents={Outcome.APPLIED: "withdrawal.applied"}, rejected_intent=REJECTED)
WITHDRAWAL_REQUESTED = declare(  # available -> held (amount + fee)
    "withdrawal_requested", Shape.HOLD, gateway=True,
    intents={Outcome.APPLIED: "withdrawal.requested"}, rejected_intent=REJECTED)
WITHDRAWAL_SETTLED = declare(  # held -> paid out, the rest released
    "withdrawal_settled", Shape.HOLD_SETTLE, gateway=True, hold_state=HoldState.SETTLED,
    intents={Outcome.APPLIED: "withdrawal.settled"}, rejected_intent=REJECTED)
WITHDRAWAL_FAILED = declare(  # held -> available
    "withdrawal_failed", Shape.HOLD_RELEASE, gateway=True, hold_state=HoldState.FAILED,
    intents={Outcome.APPLIED: "withdrawal.failed"}, rejected_intent=REJECTED)
HOLD_EXPIRED = declare(  # idem, from the expiry scheduler
    "hold_expired", Shape.HOLD_RELEASE, hold_state=HoldState.EXPIRED,
    intents={Outcome.APPLIED: "withdrawal.failed"}, rejected_intent=REJECTED)
