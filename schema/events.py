"""The payment event: the contract between ingest (writer) and consumers (readers).

An event travels as the JSON payload of an outbox row, and so as the value of a Kafka
record: amounts are strings, never JSON numbers. `parse_wire` is what a consumer uses
to read one back; it raises EventError (a deterministic failure: dead-letter it).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

import orjson

from paystream.schema.amounts import AmountError, format_amount, parse_amount
from paystream.schema.event_types import BY_NAME
from paystream.schema.event_types import EventType as EventType  # re-exported

# Outbox routing: the Event Router sends aggregatetype X to topic "paystream.<X>".
PAYMENTS_AGGREGATE = "payments"
PAYMENTS_TOPIC = "paystream.payments"
PAYMENTS_DLQ_TOPIC = "paystream.payments.dlq"
NOTIFICATIONS_AGGREGATE = "notifications"
NOTIFICATIONS_TOPIC = "paystream.notifications"

USER_ID_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
EVENT_ID_PATTERN = re.compile(r"[\x21-\x7e]{1,200}")  # printable ASCII, no spaces
ASSET_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
# An invoice's id (paystream.invoices): what a gateway deposit names to pay one.
INVOICE_ID_PATTERN = re.compile(r"inv_[0-9a-f]{32}")

# The chain facts an event carries are stored in chain_deposits: block numbers in BIGINT
# columns, log indexes in INTEGER ones. A value past these is refused where it enters.
MAX_BLOCK_NUMBER = 2**63 - 1
MAX_LOG_INDEX = 2**31 - 1
# A transfer's raw value is an EVM uint256; chain_deposits.raw_value is NUMERIC(78,0).
MAX_RAW_VALUE = 2**256 - 1


# The event types a provider, the operator, the API or the scheduler send are declared in
# schema/event_types/ (one module per family); EventType is re-exported from here.
# What a gateway may send: event_types.gateway_types().


class SettlementType(StrEnum):
    """What the finality watcher says about a chain deposit the ledger holds as pending.

    Never accepted from a provider (the ingest parses EventType only): the watcher emits
    these through the outbox (aggregate `payments`, key = the user id, so they follow the
    deposit in its partition). `chain.deposit_event_id` names the deposit; the event id
    is `<deposit event id>:finalized` / `:reorged` / `:credited` / `:reversed`, so a
    verdict recorded twice is one event to the ledger's idempotency.

    On a network with a credit depth a deposit may be credited before finality
    (deposit_credited); its finalisation then carries `chain.credited = true` and moves
    no money, and a reorg that removes it is answered by deposit_reversed.
    """

    DEPOSIT_FINALIZED = "deposit_finalized"  # pending -> available, credited once
    DEPOSIT_REORGED = "deposit_reorged"      # pending released, never credited
    DEPOSIT_CREDITED = "deposit_credited"    # pending -> available before finality
    DEPOSIT_REVERSED = "deposit_reversed"    # a credited deposit reorged out: debit it

    @property
    def is_credit(self) -> bool:
        return False

    # What EventType answers too: a settlement names its deposit in `chain`, not in
    # a reference, and is no hold or reversal of the second phase.
    @property
    def closes_hold(self) -> bool:
        return False

    @property
    def is_reversal(self) -> bool:
        return False

    @property
    def reference_field(self) -> str | None:
        return None

    @property
    def second_phase(self) -> bool:
        return False

    @property
    def plain(self) -> None:
        """No plain credit or debit: a settlement's postings depend on its outcome."""
        return None


class EventError(ValueError):
    """A payment event that breaks the contract; `reason` is a short machine label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, init=False)
class PaymentEvent:
    event_id: str
    event_type: EventType | SettlementType
    user_id: str
    asset: str
    amount: Decimal
    provider: str
    occurred_at: str | None = None
    # On-chain identity and block of a chain deposit (network, tx_hash, block_number,
    # block_hash, log_index / trace_address, token_contract, raw_value, removed ...).
    chain: dict[str, Any] | None = field(default=None)
    # The event this one acts on: the hold (withdrawal_requested's id) a settle, failure
    # or expiry closes, or the event a refund, chargeback or revert reverses.
    reference: str | None = None
    # The fee a withdrawal request holds with its amount (or a settlement charges).
    fee: Decimal | None = None
    # Why an operator adjusted or reverted (free text, for the record).
    reason: str | None = None
    # The invoice a gateway deposit pays (a chain deposit pays the invoice whose
    # address it reached: the ledger matches it, invoices/matching.py).
    invoice_id: str | None = None

    def __init__(self, event_id: str, event_type: EventType | SettlementType, user_id: str,
                 asset: str, amount: Decimal, provider: str, occurred_at: str | None = None,
                 chain: dict[str, Any] | None = None, reference: str | None = None,
                 fee: Decimal | None = None, reason: str | None = None,
                 invoice_id: str | None = None) -> None:
        # One update of the instance dict instead of the frozen dataclass's eleven
        # object.__setattr__ calls: a fifth of the cost, and the ledger builds one per
        # record. The fields stay read-only (frozen's __setattr__ still refuses).
        self.__dict__.update(
            event_id=event_id, event_type=event_type, user_id=user_id, asset=asset,
            amount=amount, provider=provider, occurred_at=occurred_at, chain=chain,
            reference=reference, fee=fee, reason=reason, invoice_id=invoice_id)

    @property
    def is_chain_deposit(self) -> bool:
        """A provider-reported on-chain deposit: held pending until final."""
        return self.event_type is EventType.DEPOSIT and self.chain is not None

    @property
    def settles_credited(self) -> bool:
        """A deposit_finalized of a deposit already credited before finality."""
        return (self.event_type is SettlementType.DEPOSIT_FINALIZED
                and (self.chain or {}).get("credited") is True)

    @property
    def settles(self) -> str | None:
        """The deposit event id a settlement event settles (None for other events)."""
        if isinstance(self.event_type, SettlementType) and self.chain is not None:
            return str(self.chain["deposit_event_id"])
        return None

    def to_wire(self) -> dict[str, Any]:
        """The JSON payload written to the outbox (amount as a canonical string)."""
        wire: dict[str, Any] = {
            "event_id": self.event_id,
            "event_type": self.event_type.value,
            "user_id": self.user_id,
            "asset": self.asset,
            "amount": format_amount(self.amount),
            "provider": self.provider,
        }
        if self.occurred_at is not None:
            wire["occurred_at"] = self.occurred_at
        if self.chain is not None:
            wire["chain"] = self.chain
        # Optional fields are left out when unset: the hashes of the events stored before
        # they existed stay the same.
        field_name = self.event_type.reference_field
        if field_name is not None and self.reference is not None:
            wire[field_name] = self.reference
        if self.fee is not None:
            wire["fee"] = format_amount(self.fee) if self.fee > 0 else "0"
        if self.reason is not None:
            wire["reason"] = self.reason
        if self.invoice_id is not None:
            wire["invoice_id"] = self.invoice_id
        return wire

    def content_hash(self) -> str:
        """A hash of the content that must match for a redelivery to be a duplicate."""
        return wire_hash(self.to_wire())


def wire_hash(wire: dict[str, Any]) -> str:
    """PaymentEvent.content_hash of an event whose to_wire() is `wire` (saves a to_wire
    when the caller has the wire form already)."""
    return hashlib.sha256(canonical_json(wire)).hexdigest()


def canonical_json(wire: dict[str, Any]) -> bytes:
    """The bytes content hashes are taken of: json.dumps(sort_keys=True), compact, ASCII.

    Stored hashes were taken of exactly these bytes, so they must never change. orjson
    writes the same bytes for sorted keys, strings, ints, bools and null as long as its
    output is printable ASCII (json.dumps escapes DEL and every non-ASCII character;
    tests/unit/test_schema_rules.py checks the equality on generated wires), in a tenth
    of the time; anything else (non-ASCII text, a float, an int beyond 64 bits) takes
    the json.dumps path.
    """
    if _plain(wire):
        try:
            fast = orjson.dumps(wire, option=orjson.OPT_SORT_KEYS)
        except TypeError:  # an int beyond 64 bits
            pass
        else:
            if fast.isascii() and b"\x7f" not in fast:  # json.dumps escapes DEL too
                return fast
    return json.dumps(wire, sort_keys=True, separators=(",", ":")).encode("ascii")


def _plain(wire: dict[str, Any]) -> bool:
    """No float anywhere, containers only one level down (the shape of every wire:
    scalars and the `chain` dict of scalars). Anything else takes the json.dumps path."""
    for value in wire.values():
        if isinstance(value, dict):
            for inner in value.values():
                if isinstance(inner, float | dict | list):
                    return False
        elif isinstance(value, float | list):
            return False
    return True


# The settlement types by wire name (the event types' is event_types.BY_NAME): a dict
# lookup, a tenth of SettlementType(name)'s cost.
_SETTLEMENTS_BY_NAME: dict[str, SettlementType] = {t.value: t for t in SettlementType}
assert not _SETTLEMENTS_BY_NAME.keys() & BY_NAME.keys(), "a settlement named as an event type"


def parse_wire(obj: object) -> PaymentEvent:
    """Read an event back from its wire form; raise EventError saying what is wrong."""
    if not isinstance(obj, dict):
        raise EventError("malformed", f"event must be a JSON object, got {type(obj).__name__}")
    event_id = _text(obj, "event_id", EVENT_ID_PATTERN)
    raw_type = _text(obj, "event_type", None)
    event_type: EventType | SettlementType | None = BY_NAME.get(raw_type)
    if event_type is None:
        event_type = _SETTLEMENTS_BY_NAME.get(raw_type)
    if event_type is None:
        raise EventError("unknown_event_type", f"unknown event_type {raw_type!r}")
    user_id = _text(obj, "user_id", USER_ID_PATTERN)
    asset = _text(obj, "asset", ASSET_PATTERN)
    try:
        amount = parse_amount(obj.get("amount"))
    except AmountError as exc:
        raise EventError("invalid_amount", str(exc)) from None
    provider = _text(obj, "provider", None)
    occurred_at = obj.get("occurred_at")
    chain = obj.get("chain")
    if chain is not None and not isinstance(chain, dict):
        raise EventError("malformed", "chain must be an object")
    if isinstance(event_type, SettlementType):
        deposit_id = (chain or {}).get("deposit_event_id")
        if not isinstance(deposit_id, str) or not EVENT_ID_PATTERN.fullmatch(deposit_id):
            raise EventError("malformed", f"{event_type} needs chain.deposit_event_id")
    reference = None
    reference_field = event_type.reference_field
    if reference_field is not None:
        reference = _text(obj, reference_field, EVENT_ID_PATTERN)
    fee = None
    if obj.get("fee") is not None:
        fee = parse_fee(obj["fee"])
    reason = obj.get("reason")
    if reason is not None and (not isinstance(reason, str) or not 1 <= len(reason) <= 500):
        raise EventError("malformed", "reason must be a string of 1 to 500 characters")
    invoice_id = None
    if obj.get("invoice_id") is not None:
        if event_type is not EventType.DEPOSIT:
            raise EventError("malformed", f"invoice_id is only for deposits, not {event_type}")
        invoice_id = _text(obj, "invoice_id", INVOICE_ID_PATTERN)
    return PaymentEvent(event_id, event_type, user_id, asset, amount, provider,
                        occurred_at if isinstance(occurred_at, str) else None, chain,
                        reference, fee, reason, invoice_id)


def parse_fee(value: object) -> Decimal:
    """A fee: an amount string, or "0" (none)."""
    if value == "0":
        return Decimal(0)
    try:
        return parse_amount(value)
    except AmountError as exc:
        raise EventError("invalid_fee", f"fee: {exc}") from None


def _text(obj: dict[str, Any], name: str, pattern: re.Pattern[str] | None) -> str:
    value = obj.get(name)
    if value is None:
        raise EventError("missing_field", f"{name} is required")
    if not isinstance(value, str):
        raise EventError("malformed", f"{name} must be a string")
    if pattern is not None and pattern.fullmatch(value) is None:
        raise EventError("malformed", f"{name} has an invalid format: {value[:80]!r}")
    return value
