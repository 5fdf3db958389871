"""Events the operator and the hold expiry scheduler put on the ledger's topic: written
as the ingest writes a delivery (a payment_events row and its outbox row in one
transaction, schema.outbox.write_events), so the ledger judges, applies and records
them like any other, exactly once.

- `paystream adjust --user U --asset A --amount ±X --reason R --idempotency-key K`:
  adjustment_credit / adjustment_debit, event id `op:adjust:K`;
- `paystream revert EVENT_ID --reason R`: a revert of what is left of an applied plain
  event, event id `op:revert:EVENT_ID` (one revert per event);
- `paystream holds expire [--loop]`: hold_expired for every hold past its expiry,
  event id `sys:hold-expired:HOLD_ID`.

The `op:` and `sys:` prefixes are refused from a gateway (ingest/payments.py), so no
delivery can take the id of one of these events and block it.

The idempotency key is the event id: the same command run twice is one event (the
second answers "already recorded"); the same key with other content is refused.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from decimal import Decimal

from paystream.schema import holds, reversals
from paystream.schema.db import Cursor
from paystream.schema.events import EVENT_ID_PATTERN, EventType, PaymentEvent
from paystream.schema.outbox import WriteOutcome, write_events

OPERATOR = "operator"
SCHEDULER = "scheduler"


class OperatorEventError(ValueError):
    """A request the operator commands refuse before writing anything; says why."""


@dataclass(frozen=True)
class Written:
    event: PaymentEvent
    outcome: WriteOutcome
    trace_id: str


def derived_id(prefix: str, subject: str, suffix: str = "") -> str:
    """`prefix:subject:suffix`, or with the subject's SHA-256 in its place when that would
    be longer than an event id may be (200): a long id must not stall the scheduler."""
    wanted = ":".join(p for p in (prefix, subject, suffix) if p)
    if len(wanted) <= 200:
        return wanted
    digest = hashlib.sha256(subject.encode()).hexdigest()
    return ":".join(p for p in (prefix, "sha256", digest, suffix) if p)


def _write(cur: Cursor, event: PaymentEvent) -> Written:
    if EVENT_ID_PATTERN.fullmatch(event.event_id) is None:
        raise OperatorEventError(f"event id {event.event_id[:80]!r} is not a valid event id"
                                 " (printable ASCII, no spaces, at most 200 characters)")
    trace_id = uuid.uuid4().hex
    (outcome,) = write_events(cur, [(event, trace_id)])
    if outcome is WriteOutcome.CONFLICT:
        raise OperatorEventError(f"{event.event_id} was already recorded with other content"
                                 " (another amount, user, asset or reason?)")
    return Written(event, outcome, trace_id)


def adjust(cur: Cursor, *, user_id: str, asset: str, amount: Decimal, reason: str,
           idempotency_key: str) -> Written:
    """An adjustment: a credit for a positive `amount`, a debit for a negative one (what
    available cannot cover becomes a shortfall, never a negative balance)."""
    if amount == 0:
        raise OperatorEventError("an adjustment of 0 moves nothing")
    cur.execute("SELECT 1 FROM users WHERE user_id = %s", (user_id,))
    if cur.fetchone() is None:
        raise OperatorEventError(f"user {user_id!r} does not exist")
    kind = EventType.ADJUSTMENT_CREDIT if amount > 0 else EventType.ADJUSTMENT_DEBIT
    return _write(cur, PaymentEvent(derived_id("op:adjust", idempotency_key), kind, user_id,
                                    asset, abs(amount), OPERATOR, reason=reason))


def revert(cur: Cursor, event_id: str, reason: str) -> Written:
    """A revert of what is left of `event_id` (an applied deposit, airdrop, withdrawal,
    fee or adjustment), refused here when there is nothing to revert."""
    found = reversals.originals(cur, [event_id]).get(event_id)
    if found is None:
        raise OperatorEventError(f"no event {event_id!r} is recorded")
    if found.status != "applied":
        raise OperatorEventError(f"{event_id} is {found.status}, not applied: nothing moved")
    if found.remaining <= 0:
        raise OperatorEventError(f"{event_id} was reversed in full already")
    original = found.event
    return _write(cur, PaymentEvent(derived_id("op:revert", event_id), EventType.REVERT,
                                    original.user_id, original.asset, found.remaining,
                                    OPERATOR, reference=event_id, reason=reason))


def expire_holds(cur: Cursor, limit: int = 500) -> list[Written]:
    """One round of the expiry scheduler, in the caller's transaction: claim the holds
    past their expiry (held -> expiring) and write their hold_expired events. Claim and
    events commit together, so a restart neither loses nor repeats one: what is
    "already done" is in the table, not in memory, and every round looks at everything
    expired so far, not at a window a missed round could skip."""
    written = []
    for hold in holds.claim_expired(cur, limit):
        written.append(_write(cur, PaymentEvent(
            derived_id("sys:hold-expired", hold.hold_id), EventType.HOLD_EXPIRED, hold.user_id,
            hold.asset, hold.amount, SCHEDULER, reference=hold.hold_id)))
    return written
