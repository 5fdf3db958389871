"""What each event posts: the double-entry rule, in one place (pure, no I/O).

Every event that moves money is one transfer; its postings sum to zero (one asset per
event). User accounts are (kind, user, asset), the platform's are named below. A
positive amount increases an account's sum: user accounts carry what the platform
owes its users, the counter-accounts the other side (custody and settlement are
negative by what they hold or are owed).

Credits and debits post against the counter-account their declaration names (C below:
schema/event_types/, e.g. settlement[provider] for a deposit or a withdrawal, fees for a
withdrawal_fee, adjustments for an operator's adjustment); everything else by its shape.

  event (outcome)                    postings
  a credit (applied)                 available +X    C -X
    deposit / airdrop                  C = settlement[provider]
    adjustment_credit                  C = adjustments
  a debit (applied)                  available -X    C +X
    withdrawal                         C = settlement[provider]
    withdrawal_fee                     C = fees
  a forced debit (applied,           available -T    receivable -(X-T)  C +X
    shortfall): adjustment_debit     (T = what available covered; the rest is owed)
  chain deposit (pending_finality)   pending +X      custody[network] -X
  deposit_credited (credited)        pending -X      available +X
  deposit_finalized (applied)        pending -X      available +X
  deposit_finalized, credited        (nothing: the credit moved it)
  deposit_reorged (reorged)          pending -X      custody[network] +X
  deposit_reversed (applied,         available -T    receivable -(X-T)  custody[network] +X
                    shortfall)       (T = what available covered; the rest is owed)
  a hold (applied)                   available -(X+F)  held +(X+F)      (F: its fee)
    withdrawal_requested
  a hold settled (applied)           held -(A+FA)  settlement +X  fees +F  available +rest
    withdrawal_settled               (A, FA: the hold's amount and fee; X <= A, F <= FA)
  a hold released (applied)          held -(A+FA)    available +(A+FA)
    withdrawal_failed, hold_expired
  a reversal (applied, shortfall)    of a credit: available -T  receivable -(X-T)  C +X
    refund / chargeback / revert     of a debit:  available +X  C -X
    (reversing X of an original      (T = what available covered: the shortfall path)
     whose counter-account is C)
  rejections (insufficient_funds,    (nothing)
    account_flagged, hold_not_open, exceeds_hold, invalid_reversal, exceeds_original)

So custody[network, asset] is minus the chain deposits the ledger holds on that network
(pending or credited, not reorged or reversed): reconcile compares the two.
"""

from __future__ import annotations

from decimal import Decimal, getcontext, localcontext

from paystream.schema.accounts import PLATFORM, AccountKind, AccountRef
from paystream.schema.amounts import EXACT_CONTEXT
from paystream.schema.event_types import Counter, EventType, Shape
from paystream.schema.events import PaymentEvent, SettlementType
from paystream.schema.holds import Hold
from paystream.schema.processed_events import REJECTIONS, Outcome

ZERO = Decimal(0)
EXACT = EXACT_CONTEXT  # the money's context (schema/amounts.py)
Posting = tuple[AccountRef, Decimal]

# A credit or a debit, applied, is most of the traffic: postings() answers it from its
# declaration's `plain` (a credit?, its counter) without _postings' walk (the same rows
# as its last branch; the table above and the unit tests hold both).
_AVAILABLE = AccountKind.AVAILABLE
_APPLIED = Outcome.APPLIED


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
             network: str | None = None, hold: Hold | None = None,
             original: PaymentEvent | None = None) -> list[Posting]:
    """The postings of `event` with `outcome` (the table above); [] when it moves
    nothing. `available` (just before it) only matters to a debit that may fall short;
    `network` is the chain of a chain deposit or of the deposit a settlement settles;
    `hold` the hold a settle, failure or expiry closes; `original` what a reversal
    reverses."""
    if outcome in REJECTIONS:
        return []
    plain = event.event_type.plain if outcome is _APPLIED else None
    if plain is not None:
        return _plain(event, *plain)
    if getcontext().prec >= EXACT.prec:  # the planner's batch context: exact already
        return _checked(event, outcome, available, network, hold, original)
    with localcontext(EXACT):  # unary minus rounds to the context's precision too
        return _checked(event, outcome, available, network, hold, original)


def _checked(event: PaymentEvent, outcome: Outcome, available: Decimal, network: str | None,
             hold: Hold | None, original: PaymentEvent | None) -> list[Posting]:
    if event.event_type.second_phase:
        found = _second_phase(event, available, hold, original)
    else:
        found = _postings(event, outcome, available, network)
    found = [(ref, amount) for ref, amount in found if amount]
    if sum(amount for _, amount in found) != ZERO:
        raise UnbalancedTransferError(
            f"{event.event_id} {event.event_type}: postings {found} do not sum to 0")
    return found


def _plain(event: PaymentEvent, credit: bool, counter: Counter) -> list[Posting]:
    """A credit's or a debit's two postings; copy_negate is exact in any context."""
    x = event.amount
    if not x:
        return []
    user_side, other_side = (x, x.copy_negate()) if credit else (x.copy_negate(), x)
    owner = event.provider if counter.per_provider else PLATFORM
    return [(AccountRef(_AVAILABLE, event.user_id, event.asset), user_side),
            (AccountRef(counter.kind, owner, event.asset), other_side)]


def _taken(x: Decimal, available: Decimal, counter: AccountRef, user: str,
           asset: str) -> list[Posting]:
    """A debit of `x` that never takes available below zero: the rest is the platform's
    receivable (the shortfall path); `counter` receives all of it."""
    debited, owed = reversal_split(x, available)
    return [(AccountRef.user(AccountKind.AVAILABLE, user, asset), -debited),
            (AccountRef.platform(AccountKind.RECEIVABLE, asset), -owed), (counter, x)]


def _second_phase(event: PaymentEvent, available: Decimal, hold: Hold | None,
                  original: PaymentEvent | None) -> list[Posting]:
    """Holds, their closes, reversals and forced debits (an outcome that is not a
    rejection), by the event's shape."""
    x, user, asset, kind = event.amount, event.user_id, event.asset, event.event_type
    assert isinstance(kind, EventType), kind

    def mine(k: AccountKind) -> AccountRef:
        return AccountRef(k, user, asset)

    shape = kind.shape
    if shape is Shape.HOLD:
        total = x + (event.fee or ZERO)
        return [(mine(AccountKind.AVAILABLE), -total), (mine(AccountKind.HELD), total)]
    if shape is Shape.FORCED_DEBIT:
        assert kind.counter is not None
        return _taken(x, available, kind.counter.account(event.provider, asset), user, asset)
    if kind.closes_hold:
        assert hold is not None, f"{event.event_id}: closing a hold needs the hold"
        released = (mine(AccountKind.HELD), -hold.total)
        if shape is Shape.HOLD_RELEASE:
            return [released, (mine(AccountKind.AVAILABLE), hold.total)]
        fee = hold.fee if event.fee is None else event.fee
        return [
            released, (AccountRef(AccountKind.SETTLEMENT, hold.provider, asset), x),
            (AccountRef.platform(AccountKind.FEES, asset), fee),
            (mine(AccountKind.AVAILABLE), hold.total - x - fee)]
    assert shape is Shape.REVERSAL and original is not None, (
        f"{event.event_id}: a reversal needs its original")
    # The original's own postings say which way the money went and its counter-account.
    then = _postings(original, Outcome.APPLIED, ZERO, None)
    user_side = next(amount for ref, amount in then if ref.kind is AccountKind.AVAILABLE)
    counter = next(ref for ref, _ in then if ref.kind is not AccountKind.AVAILABLE)
    if user_side > 0:  # a credit taken back
        return _taken(x, available, counter, user, asset)
    return [(mine(AccountKind.AVAILABLE), x), (counter, -x)]


def _postings(event: PaymentEvent, outcome: Outcome, available: Decimal,
              network: str | None) -> list[Posting]:
    x, user, asset = event.amount, event.user_id, event.asset

    def mine(kind: AccountKind) -> AccountRef:  # one of USER_KINDS, never input
        return AccountRef(kind, user, asset)

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
        found = _taken(x, available, custody(), user, asset)
    elif outcome is not Outcome.APPLIED or event.settles_credited:
        found = []
    elif kind is SettlementType.DEPOSIT_FINALIZED:
        found = [(mine(AccountKind.PENDING), -x), (mine(AccountKind.AVAILABLE), x)]
    else:  # a credit or a debit (forced or not) against its counter-account
        assert isinstance(kind, EventType) and kind.counter is not None, kind
        sign = 1 if kind.is_credit else -1
        found = [(mine(AccountKind.AVAILABLE), sign * x),
                 (kind.counter.account(event.provider, asset), -sign * x)]
    return found
