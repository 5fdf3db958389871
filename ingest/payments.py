"""The generic payment gateway's body: one payment event, validated field by field.

The gateway names the user itself (it is the system of record for its payments), signs
with Standard Webhooks, and sends amounts as JSON strings checked by schema.amounts.
PaymentWrite is what one such delivery writes, alone or grouped with others (the
ingest.recording.DeliveryWrite contract).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from paystream.ingest import refusals
from paystream.ingest.errors import ConflictingDuplicateError, IngestError, PayloadError
from paystream.ingest.recording import DeliveryWrite, Recorded
from paystream.schema.amounts import AmountError, parse_amount
from paystream.schema.db import Cursor
from paystream.schema.event_types import BY_NAME, gateway_types
from paystream.schema.events import (
    ASSET_PATTERN,
    EVENT_ID_PATTERN,
    INVOICE_ID_PATTERN,
    USER_ID_PATTERN,
    EventError,
    EventType,
    PaymentEvent,
    parse_fee,
)
from paystream.schema.outbox import WriteOutcome, write_events

PROVIDER = "payments"
# On-chain event ids ("ETH_MAINNET:0x<hash>:...") belong to chain providers; a gateway
# must not be able to occupy (and so block) the id of a real chain deposit.
CHAIN_EVENT_ID = re.compile(r"[A-Z0-9_]+:0x[0-9a-f]{64}(:.*)?")
# The ids of operator adjustments / reverts and of scheduled hold expiries
# (consumers/ledger/operator_events.py), of the merchant API's withdrawal requests
# (api/withdrawals.py), and of the events a statement line with no reference resolves to
# (statements/decisions.py, which alone may use its prefix): a gateway taking one could
# block that event.
STATEMENT_PREFIX = "stmt:"
RESERVED_PREFIXES = ("op:", "sys:", "api:", STATEMENT_PREFIX)
# A chain asset ("ETH_MAINNET:native", "ETH_MAINNET:0x<contract>"): only a chain provider
# reports those, and the ledger holds them until their block is final.
CHAIN_ASSET = re.compile(r"[A-Z0-9_]+:.*")


def parse_payment(obj: Any, default_asset: str,
                  assets: Collection[str] | None = None, *,
                  reserved: tuple[str, ...] = RESERVED_PREFIXES,
                  provider: str = PROVIDER) -> PaymentEvent:
    """Validate a gateway body; raise PayloadError naming the first broken field.

    `assets` are the only assets the gateway may credit (PAYMENTS_ASSETS); by default
    the default asset alone. `reserved`: the event id prefixes refused (a statement's
    resolution writes under its own). `provider`: the event's (another gateway that
    sends this body names itself)."""
    if not isinstance(obj, dict):
        raise PayloadError("the payload must be a JSON object")
    event_id = _text(obj, "event_id", EVENT_ID_PATTERN)
    if CHAIN_EVENT_ID.fullmatch(event_id):
        raise PayloadError("event_id has the form of an on-chain event id, which is "
                           "reserved for chain providers")
    if event_id.startswith(reserved):
        raise PayloadError(f"event_id may not start with {' or '.join(reserved)} (reserved"
                           " for the operator's, the scheduler's, the API's and statements'"
                           " events)")
    raw_type = _text(obj, "event_type", None)
    event_type = BY_NAME.get(raw_type)
    if event_type is None or not event_type.gateway:
        raise PayloadError(f"event_type must be one of {', '.join(gateway_types())},"
                           f" got {raw_type[:40]!r}", code="invalid_event_type")
    reference = None
    if event_type.reference_field is not None:
        reference = _text(obj, event_type.reference_field, EVENT_ID_PATTERN)
        if reference == event_id:
            raise PayloadError(f"{event_type.reference_field} names the event itself")
    fee = None
    if obj.get("fee") is not None:
        if not event_type.carries_fee:
            # A fee is held with the request and charged at its settlement.
            fee_types = ", ".join(t for t in gateway_types() if t.carries_fee)
            raise PayloadError(f"fee is only for {fee_types}", code="unexpected_field")
        try:
            fee = parse_fee(obj["fee"])
        except EventError as exc:
            raise PayloadError(exc.detail, code="invalid_fee") from None
    user_id = _text(obj, "user_id", USER_ID_PATTERN)
    if "amount" not in obj:
        raise PayloadError("amount is required", code="missing_field")
    try:
        amount = parse_amount(obj["amount"])
    except AmountError as exc:
        raise PayloadError(str(exc), code="invalid_amount") from None
    asset = default_asset if obj.get("asset") is None else _text(obj, "asset", ASSET_PATTERN)
    allowed = (default_asset,) if assets is None else assets
    if asset not in allowed:
        why = (" it is a chain asset, credited only from a chain provider once final"
               if CHAIN_ASSET.fullmatch(asset) else "")
        raise PayloadError(f"asset {asset[:80]!r} is not one this gateway may credit"
                           f"{':' + why if why else ''} (allowed: {', '.join(sorted(allowed))})",
                           code="unsupported_asset")
    invoice_id = None
    if obj.get("invoice_id") is not None:
        if event_type is not EventType.DEPOSIT:
            raise PayloadError("invoice_id is only for deposit", code="unexpected_field")
        # Only its form is checked here: whether the invoice exists, is the user's and
        # in this asset is the ledger's to judge (a deposit that pays no invoice still
        # credits the user: money is never refused).
        invoice_id = _text(obj, "invoice_id", INVOICE_ID_PATTERN)
    return PaymentEvent(event_id=event_id, event_type=event_type, user_id=user_id,
                        asset=asset, amount=amount, provider=provider, reference=reference,
                        fee=fee, invoice_id=invoice_id)


def _text(obj: dict[str, Any], name: str, pattern: re.Pattern[str] | None) -> str:
    value = obj.get(name)
    if value is None:
        raise PayloadError(f"{name} is required", code="missing_field")
    if not isinstance(value, str):
        raise PayloadError(f"{name} must be a string")
    if pattern is not None and pattern.fullmatch(value) is None:
        raise PayloadError(f"{name} has an invalid format: {value[:80]!r}")
    return value


@dataclass(frozen=True, slots=True)
class PaymentWrite(DeliveryWrite):
    """One gateway delivery's database work: its one event, through the outbox, unless
    it is known not to apply (ingest.refusals: then only the refusal is recorded). The
    ingest.recording.DeliveryWrite contract: several that meet in a group commit are
    written together in a few multi-row statements for all of them (one lookup of all
    their users), with the outcomes of writing each alone."""

    event: PaymentEvent
    trace_id: str

    def write(self, cur: Cursor) -> Recorded:
        """`write_together` of one: the one way a gateway delivery is written."""
        [answer] = self.write_together(cur, [self])
        if isinstance(answer, IngestError):
            raise answer
        return answer

    @classmethod
    def write_together(cls, cur: Cursor, writes: Sequence[PaymentWrite]
                       ) -> list[Recorded | IngestError]:
        """Each write's answer, in order. A conflict wrote nothing: nothing to undo."""
        events = [w.event for w in writes]
        verdicts = refusals.judge(events, refusals.look_up(cur, events))
        refusals.record(cur, [(w.event, w.trace_id, v)
                              for w, v in zip(writes, verdicts, strict=True) if v is not None])
        outcomes = iter(write_events(cur, [(w.event, w.trace_id)
                                           for w, v in zip(writes, verdicts, strict=True)
                                           if v is None]))
        answers: list[Recorded | IngestError] = []
        for write, verdict in zip(writes, verdicts, strict=True):
            if verdict is not None:
                answers.append(Recorded(refused=verdict,
                                        refused_event_id=write.event.event_id))
                continue
            outcome = next(outcomes)
            if outcome is WriteOutcome.CONFLICT:
                event_id = write.event.event_id
                answers.append(ConflictingDuplicateError(
                    f"event {event_id} was already received with different content",
                    event_id=event_id))
            else:
                answers.append(Recorded(events=[(write.event.event_id, outcome)]))
        return answers
