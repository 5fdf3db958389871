"""Notification intents: the one owner of their vocabulary, ids and wire form.

An intent says "this user-visible change happened": the ledger (and the operator, for a
resolved shortfall) writes one to the outbox in the transaction that made the change, so
an intent exists exactly when its change committed. Debezium routes it to
paystream.notifications (key = the user id); the notifier (consumers/notifier.py) records
it and delivers it to the endpoints that want it (notify/delivery.py).

  - `id` is derived from the source event id and the intent type (intent_id), so a
    replay of the same change yields the same id: receivers deduplicate on it (it is the
    `webhook-id` of every delivery attempt) and the notifier's tables are keyed by it.
  - `type` is one of IntentType (`deposit.credited`, ...); endpoints filter on it.
  - `data` always carries the source `event_id`, its `event_type`, `user_id`, `asset`
    and `amount` (a string, never a number), plus what the type adds (a reason, the
    deposit a settlement settles, the shortfall owed).
The record value on the topic is the webhook body itself: {"type", "id", "created_at",
"data"}.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from paystream.notify.seal import Sealer
from paystream.schema.amounts import AmountError, format_amount, parse_amount
from paystream.schema.events import (
    EVENT_ID_PATTERN,
    USER_ID_PATTERN,
    EventType,
    PaymentEvent,
    SettlementType,
)
from paystream.schema.idempotency import idempotency_key
from paystream.schema.processed_events import Outcome

INTENT_ID_PREFIX = "ntf_"
INTENT_ID_PATTERN = re.compile(r"ntf_[0-9a-f]{32}")


class IntentType(StrEnum):
    DEPOSIT_PENDING = "deposit.pending"        # a chain deposit held until final
    DEPOSIT_CREDITED = "deposit.credited"      # money available (plain, or before finality)
    DEPOSIT_FINALIZED = "deposit.finalized"    # a chain deposit final
    DEPOSIT_REORGED = "deposit.reorged"        # a pending chain deposit gone, never credited
    DEPOSIT_REVERSED = "deposit.reversed"      # a credited chain deposit taken back
    WITHDRAWAL_APPLIED = "withdrawal.applied"  # a one-shot withdrawal (or fee) paid out
    WITHDRAWAL_REJECTED = "withdrawal.rejected"
    WITHDRAWAL_REQUESTED = "withdrawal.requested"  # money held
    WITHDRAWAL_SETTLED = "withdrawal.settled"
    WITHDRAWAL_FAILED = "withdrawal.failed"    # failed or expired: the hold released
    BALANCE_REVERSED = "balance.reversed"      # a refund, chargeback or revert applied
    BALANCE_ADJUSTED = "balance.adjusted"      # an operator's adjustment
    BALANCE_REJECTED = "balance.rejected"      # a reversal or adjustment refused
    SHORTFALL_OPENED = "shortfall.opened"      # the user owes: debits refused
    SHORTFALL_RESOLVED = "shortfall.resolved"
    # Scheduled reminders (notify/reminders.py), keyed `<kind>:<subject>:<cycle>`.
    REMINDER_SHORTFALL_OPEN = "reminder.shortfall_open"  # still owed after 1 h, 24 h, 72 h
    REMINDER_DEPOSIT_WAITING = "reminder.deposit_waiting"  # finality long overdue
    REMINDER_HOLD_EXPIRING = "reminder.hold_expiring"  # a hold about to be voided
    REMINDER_INVOICE_UNPAID = "reminder.invoice_unpaid"  # an invoice's deadline close
    # Invoices (paystream.invoices): the invoice's id is the source (data.event_id), or
    # the payment's event id for what one payment does (paid_partial, paid_late).
    # About an endpoint itself (notify/merchant_endpoints.py, notify/store.py): a test
    # the merchant asked for, sent to that endpoint only; one disabled for failing, told
    # to the merchant's other endpoints.
    ENDPOINT_TEST = "endpoint.test"
    ENDPOINT_DISABLED = "endpoint.disabled"
    INVOICE_CREATED = "invoice.created"
    INVOICE_PROCESSING = "invoice.processing"  # a payment seen, not final yet
    INVOICE_SETTLED = "invoice.settled"
    INVOICE_EXPIRED = "invoice.expired"
    INVOICE_INVALID = "invoice.invalid"        # cancelled, or a settling payment reversed
    INVOICE_PAID_PARTIAL = "invoice.paid_partial"
    INVOICE_PAID_LATE = "invoice.paid_late"


_BY_NAME: dict[str, IntentType] = {t.value: t for t in IntentType}
# What a settlement tells its user, by (type, outcome). An event type's intents are in its
# declaration (schema/event_types/): `intents` per outcome, `rejected_intent`.
_OF_SETTLEMENT: dict[tuple[SettlementType, Outcome], IntentType] = {
    (SettlementType.DEPOSIT_FINALIZED, Outcome.APPLIED): IntentType.DEPOSIT_FINALIZED,
    (SettlementType.DEPOSIT_REORGED, Outcome.REORGED): IntentType.DEPOSIT_REORGED,
    (SettlementType.DEPOSIT_CREDITED, Outcome.CREDITED): IntentType.DEPOSIT_CREDITED,
    (SettlementType.DEPOSIT_CREDITED, Outcome.APPLIED): IntentType.DEPOSIT_CREDITED,
    (SettlementType.DEPOSIT_REVERSED, Outcome.APPLIED): IntentType.DEPOSIT_REVERSED,
    (SettlementType.DEPOSIT_REVERSED, Outcome.SHORTFALL): IntentType.DEPOSIT_REVERSED,
}


def _declared_intent(event_type: EventType | SettlementType, outcome: Outcome
                     ) -> IntentType | None:
    """The intent an event's outcome raises: its declaration's, a settlement's above."""
    if isinstance(event_type, SettlementType):
        if outcome.is_rejection:
            return IntentType.BALANCE_REJECTED
        return _OF_SETTLEMENT.get((event_type, outcome))
    name = (event_type.rejected_intent if outcome.is_rejection
            else event_type.intents.get(outcome))
    return None if name is None else _BY_NAME[name]


def intent_id(source_event_id: str, intent_type: IntentType) -> str:
    """The stable id of the intent `intent_type` of `source_event_id`: the same change
    replayed gets the same id (128 bits of the length-prefixed SHA-256)."""
    return INTENT_ID_PREFIX + idempotency_key(source_event_id, intent_type.value)[:32]


@dataclass(frozen=True, init=False)
class Intent:
    id: str
    type: IntentType
    user_id: str
    created_at: str  # ISO 8601, UTC
    data: dict[str, Any]

    def __init__(self, id: str, type: IntentType, user_id: str, created_at: str,
                 data: dict[str, Any]) -> None:
        # One dict update instead of five frozen-setattr calls: the ledger makes one per
        # event it applies. The fields stay read-only (frozen's __setattr__ refuses).
        self.__dict__.update(id=id, type=type, user_id=user_id, created_at=created_at,
                             data=data)

    def body(self) -> dict[str, Any]:
        """The wire form: the topic's record value and the webhook's JSON body."""
        return {"type": self.type.value, "id": self.id, "created_at": self.created_at,
                "data": self.data}


def now_text() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_intent(intent_type: IntentType, source_event_id: str, user_id: str, *,
               event_type: str, asset: str, amount: Decimal, created_at: str,
               **extra: Any) -> Intent:
    data: dict[str, Any] = {"event_id": source_event_id, "event_type": event_type,
                            "user_id": user_id, "asset": asset,
                            "amount": format_amount(amount) if amount > 0 else "0"}
    data.update({k: v for k, v in extra.items() if v is not None})
    return Intent(intent_id(source_event_id, intent_type), intent_type, user_id,
                  created_at, data)


def of_outcome(event: PaymentEvent, outcome: Outcome, created_at: str, **extra: Any
               ) -> Intent | None:
    """The intent an event's fresh outcome makes, if any (every rejection is one, but
    unknown_user: there is no user to tell, and no endpoint of theirs)."""
    if outcome is Outcome.UNKNOWN_USER:
        return None
    kind = _declared_intent(event.event_type, outcome)
    if kind is None:
        return None
    if outcome.is_rejection:
        extra.setdefault("reason", outcome.value)
    if event.settles is not None:
        extra.setdefault("deposit_event_id", event.settles)
    if event.reference is not None:
        extra.setdefault("reference", event.reference)
    return new_intent(kind, event.event_id, event.user_id, event_type=event.event_type.value,
                      asset=event.asset, amount=event.amount, created_at=created_at, **extra)


# Intents per record on paystream.notifications: a ledger batch's intents travel
# together, so Debezium, the broker and the notifier handle one record per batch and
# source partition instead of one per intent (Connect alone spent ~43 us of CPU per
# record); 500 intents of ~400 bytes keep a record well under the 1 MiB a broker takes.
BATCH_LIMIT = 500
BATCH_TYPE = "intents"


def outbox_batches(intents: Sequence[tuple[Intent, str]], key: str, sealer: Sealer
                   ) -> list[dict[str, Any]]:
    """(intent, trace id) pairs as schema.outbox.publish messages: records of at most
    BATCH_LIMIT intents, keyed by `key`, each value {"intents": [body + "trace_id"],
    "seal": ...} (the webhook body of each with the trace id of the change that made
    it; the seal over the bodies: notify/seal.py). A record's `event_id` and `trace_id`
    headers are its first intent's id and trace id."""
    out = []
    for start in range(0, len(intents), BATCH_LIMIT):
        chunk = intents[start:start + BATCH_LIMIT]
        bodies = [{"type": i.type.value, "id": i.id, "created_at": i.created_at,
                   "data": i.data} for i, _ in chunk]
        seal = sealer.seal(bodies)
        for body, (_, t) in zip(bodies, chunk, strict=True):
            body["trace_id"] = t  # after the seal: a trace id is not the intent's content
        out.append({"aggregateid": key, "type": BATCH_TYPE, "event_id": chunk[0][0].id,
                    "payload": {"intents": bodies, "seal": seal}, "trace_id": chunk[0][1]})
    return out


class IntentError(ValueError):
    """A record that is not an intent; `reason` is a short machine label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def parse_batch(obj: object, sealer: Sealer
                ) -> tuple[list[tuple[Intent, str | None]], list[IntentError]]:
    """A record's value read back: its intents with their trace ids, and what is wrong
    with the others (each element is judged alone: parse_intent). A value that is no
    batch at all, or whose seal does not verify (notify/seal.py), is one error and no
    intent."""
    if not isinstance(obj, dict) or not isinstance(obj.get("intents"), list):
        return [], [IntentError("malformed", 'a record is {"intents": [...]}')]
    items = obj["intents"]
    if not 1 <= len(items) <= BATCH_LIMIT:
        return [], [IntentError("malformed",
                                f"a record holds 1 to {BATCH_LIMIT} intents, not {len(items)}")]
    if "seal" not in obj:
        return [], [IntentError("unsealed", "the record carries no seal: not made by a "
                                "producer of intents (notify/seal.py)")]
    if not (all(isinstance(item, dict) for item in items)
            and sealer.verifies(items, obj["seal"])):
        return [], [IntentError("bad_seal", "the record's seal does not match its intents:"
                                " altered, or not sealed with our key")]
    intents: list[tuple[Intent, str | None]] = []
    errors: list[IntentError] = []
    for item in items:
        try:
            intent = parse_intent(item)
        except IntentError as exc:
            errors.append(exc)
            continue
        trace_id = item.get("trace_id")
        intents.append((intent, trace_id if isinstance(trace_id, str) else None))
    return intents, errors


def parse_intent(obj: object) -> Intent:
    """An intent read back from the topic; raise IntentError saying what is wrong. The
    id must be the one its source event and type derive (nothing else may name it)."""
    if not isinstance(obj, dict):
        raise IntentError("malformed", "an intent is a JSON object")
    try:
        kind = IntentType(str(obj.get("type")))
    except ValueError:
        raise IntentError("unknown_intent_type", f"unknown type {obj.get('type')!r}") from None
    data = obj.get("data")
    if not isinstance(data, dict):
        raise IntentError("malformed", "data must be an object")
    for name, pattern in (("event_id", EVENT_ID_PATTERN), ("user_id", USER_ID_PATTERN)):
        value = data.get(name)
        if not isinstance(value, str) or pattern.fullmatch(value) is None:
            raise IntentError("malformed", f"data.{name} is missing or invalid")
    amount = data.get("amount")
    if amount != "0":
        try:
            parse_amount(amount)
        except AmountError as exc:
            raise IntentError("invalid_amount", f"data.amount: {exc}") from None
    if not isinstance(data.get("asset"), str):
        raise IntentError("malformed", "data.asset must be a string")
    given = obj.get("id")
    expected = intent_id(data["event_id"], kind)
    if given != expected:
        raise IntentError("wrong_intent_id", f"id {str(given)[:80]!r} is not {expected}")
    created_at = obj.get("created_at")
    try:
        datetime.fromisoformat(str(created_at))
    except ValueError:
        raise IntentError("malformed", "created_at must be an ISO 8601 time") from None
    return Intent(expected, kind, data["user_id"], str(created_at), data)


def wants(patterns: Sequence[str], intent_type: str) -> bool:
    """Whether an endpoint filtering on `patterns` (`deposit.*`, `shortfall.opened`;
    none = every type) wants `intent_type`."""
    if not patterns:
        return True
    for pattern in patterns:
        if pattern in ("*", intent_type):
            return True
        if pattern.endswith(".*") and intent_type.startswith(pattern[:-1]):
            return True
    return False


def check_pattern(pattern: str) -> str:
    """An endpoint's event filter, as typed: a type, `<family>.*` or `*`."""
    families = {t.value.split(".")[0] for t in IntentType}
    if pattern == "*" or pattern in {t.value for t in IntentType}:
        return pattern
    if pattern.endswith(".*") and pattern[:-2] in families:
        return pattern
    raise ValueError(f"unknown event filter {pattern!r}: a type ({', '.join(IntentType)}),"
                     f" a family ({', '.join(sorted(f + '.*' for f in families))}) or *")
