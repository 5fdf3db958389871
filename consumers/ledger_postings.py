"""What each event posts: the double-entry rule, in one place (pure, no I/O).

Every event that moves money is one transfer; its postings sum to zero (one asset per
event). User accounts are (kind, user, asset), the platform's are named below. A
positive amount increases an account's sum: user accounts carry what the platform
owes its users, the counter-accounts the other side (custody and settlement are
negative by what they hold or are owed).

  event (outcome)                    postings
  deposit / airdrop (applied)        available +X    settlement[provider] -X
  withdrawal (applied)               available -X    settlement[provider] +X
  withdrawal_fee (applied)           available -X    fees +X
  chain deposit (pending_finality)   pending +X      custody[network] -X
  deposit_credited (credited)        pending -X      available +X
  deposit_finalized (applied)        pending -X      available +X
  deposit_finalized, credited        (nothing: the credit moved it)
  deposit_reorged (reorged)          pending -X      custody[network] +X
  deposit_reversed (applied,         available -T    receivable -(X-T)  custody[network] +X
                    shortfall)       (T = what available covered; the rest is owed)
  rejections (insufficient_funds,    (nothing)
    account_flagged)

So custody[network, asset] is minus the chain deposits the ledger holds on that network
(pending or credited, not reorged or reversed): reconcile compares the two.
"""

from __future__ import annotations

from decimal import Context, Decimal, localcontext

from paystream.schema.accounts import AccountKind, AccountRef
from paystream.schema.events import EventType, PaymentEvent, SettlementType
from paystream.schema.processed_events import Outcome

ZERO = Decimal(0)
# Exact for any sum of a few NUMERIC(38,18) amounts (the default context keeps 28 digits).
EXACT = Context(prec=60)
Posting = tuple[AccountRef, Decimal]


class UnbalancedTransferError(AssertionError):
    """A planned transfer that does not sum to zero: a bug in the rule table, never
    input (raised before anything is written)."""


def reversal_split(amount: Decimal, available: Decimal) -> tuple[Decimal, Decimal]:
    """(debited, owed) of a reversal of `amount` over `available`: take what is there,
    never below zero, and the rest is a shortfall. debited + owed == amount, always."""
    with localcontext(EXACT):
        debited = min(amount, max(available, ZERO))
        return debited, amount - debited


def postings(event: PaymentEvent, outcome: Outcome, available: Decimal = ZERO,
             network: str | None = None) -> list[Posting]:
    """The postings of `event` with `outcome` (the table above); [] when it moves
    nothing. `available` (just before it) only matters to a reversal; `network` is the
    chain of a chain deposit or of the deposit a settlement settles."""
    with localcontext(EXACT):  # unary minus rounds to the context's precision too
        return _postings(event, outcome, available, network)


def _postings(event: PaymentEvent, outcome: Outcome, available: Decimal,
              network: str | None) -> list[Posting]:
    x, user, asset = event.amount, event.user_id, event.asset

    def mine(kind: AccountKind) -> AccountRef:
        return AccountRef.user(kind, user, asset)

    def custody() -> AccountRef:
        assert network is not None, f"{event.event_id}: a chain posting needs its network"
        return AccountRef(AccountKind.CUSTODY, network, asset)

    kind = event.event_type
    found: list[Posting]
    if outcome is Outcome.PENDING_FINALITY:
        found = [(mine(AccountKind.PENDING), x), (custody(), -x)]
    elif outcome is Outcome.REORGED:
        found = [(mine(AccountKind.PENDING), -x), (custody(), x)]
    elif outcome is Outcome.CREDITED:
        found = [(mine(AccountKind.PENDING), -x), (mine(AccountKind.AVAILABLE), x)]
    elif kind is SettlementType.DEPOSIT_REVERSED and outcome in (Outcome.APPLIED,
                                                                 Outcome.SHORTFALL):
        debited, owed = reversal_split(x, available)
        found = [(mine(AccountKind.AVAILABLE), -debited),
                 (AccountRef.platform(AccountKind.RECEIVABLE, asset), -owed), (custody(), x)]
    elif outcome is not Outcome.APPLIED or event.settles_credited:
        found = []
    elif kind is SettlementType.DEPOSIT_FINALIZED:
        found = [(mine(AccountKind.PENDING), -x), (mine(AccountKind.AVAILABLE), x)]
    elif kind is EventType.WITHDRAWAL_FEE:
        found = [(mine(AccountKind.AVAILABLE), -x),
                 (AccountRef.platform(AccountKind.FEES, asset), x)]
    else:
        sign = 1 if kind.is_credit else -1
        found = [(mine(AccountKind.AVAILABLE), sign * x),
                 (AccountRef(AccountKind.SETTLEMENT, event.provider, asset), -sign * x)]
    found = [(ref, amount) for ref, amount in found if amount != ZERO]
    if sum((amount for _, amount in found), ZERO) != ZERO:
        raise UnbalancedTransferError(f"{event.event_id} {kind}: postings {found} do not sum to 0")
    return found
