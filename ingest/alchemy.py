"""Alchemy Notify Address Activity: from a verified payload to payment events and notices.

Two pure steps around one database lookup:
  parse_delivery(obj)      validates the envelope (a breach: 400, nothing written) and reads
                           each activity as a ChainTransfer, or as an UnusableActivity that
                           says what it lacks (an activity is never a reason for a 400);
  classify(delivery, owners) turns each transfer into a deposit event for the user who owns
                           the receiving address, or into a notice that is never credited.
Only an activity that could be credited (a fungible transfer into a known address) needs
every field: an NFT without a transaction hash, as Alchemy's own docs show one, is a
notice like any NFT. An activity that can never be credited is answered 200 and kept:
a 400 would make Alchemy retry the same bytes until it pauses the webhook, which stops
every user's deposits.
AlchemyWrite is what one delivery writes (the lookup of the owners, then the events and
notices), the ingest.recording.DeliveryWrite contract.
The event id is the transfer's on-chain identity, so a retried delivery and the same
transfer repeated in another payload both map to the same event. Nothing that varies
between payloads (delivery id, createdAt, the float `value`) enters an event.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from paystream.ingest.errors import IngestError, PayloadError
from paystream.ingest.notices import Notice, NoticeKind, notice_id
from paystream.ingest.recording import DeliveryWrite, Recorded, record
from paystream.schema.amounts import AmountError, from_base_units
from paystream.schema.chain import (
    ADDRESS_PATTERN,
    NETWORK_PATTERN,
    DepositError,
    ExpectedDeposit,
    deposit_asset,
    deposit_event_id,
)
from paystream.schema.db import Cursor
from paystream.schema.events import (
    EVENT_ID_PATTERN,
    MAX_BLOCK_NUMBER,
    MAX_LOG_INDEX,
    MAX_RAW_VALUE,
    EventType,
    PaymentEvent,
)

PROVIDER = "alchemy"
ADDRESS_ACTIVITY = "ADDRESS_ACTIVITY"
FUNGIBLE_TOKEN_CATEGORIES = frozenset({"erc20", "token"})
NATIVE_CATEGORIES = frozenset({"external", "internal"})
NFT_CATEGORIES = frozenset({"erc721", "erc1155", "specialnft"})

TX_HASH_PATTERN = re.compile(r"0x[0-9a-fA-F]{64}")
HEX_PATTERN = re.compile(r"0x[0-9a-fA-F]{0,128}")
TRACE_PATTERN = re.compile(r"[A-Za-z0-9_]{1,64}")
# The finality watcher names its verdicts "<deposit id>:finalized" (the longest suffix):
# those must pass EVENT_ID_PATTERN too, so a deposit id leaves room for the suffix.
MAX_DEPOSIT_EVENT_ID = 200 - len(":finalized")


@dataclass(frozen=True)
class ChainTransfer:
    """One validated `event.activity[]` item, addresses and hashes lowercased."""

    position: int
    network: str
    category: str
    tx_hash: str
    block_number: int
    block_hash: str | None
    sender: str | None
    recipient: str | None
    log_index: int | None
    trace_address: str | None
    token_contract: str | None
    raw_value: int | None  # None when the payload carries no fungible value ("0x")
    decimals: int | None
    removed: bool
    nft: bool
    activity: dict[str, Any] = field(repr=False)

    @property
    def event_id(self) -> str:
        """The on-chain identity: token log, internal trace, or the external transaction."""
        return deposit_event_id(self.network, self.tx_hash, log_index=self.log_index,
                                trace_address=self.trace_address)

    @property
    def asset(self) -> str:
        return deposit_asset(self.network, self.token_contract)

    def chain(self) -> dict[str, Any]:
        """What a later stage needs for finality and reorgs (PaymentEvent.chain).

        Fields that do not apply (no log index for an external transfer, ...) are left
        out rather than null. Stored content hashes were taken of this shape, so it must
        not change: a redelivery of an old transfer would otherwise be a conflict.
        """
        facts = {
            "network": self.network,
            "category": self.category,
            "tx_hash": self.tx_hash,
            "block_number": self.block_number,
            "block_hash": self.block_hash,
            "log_index": self.log_index,
            "trace_address": self.trace_address,
            "token_contract": self.token_contract,
            "raw_value": hex(self.raw_value) if self.raw_value is not None else None,
            "decimals": self.decimals,
            "sender": self.sender,
            "recipient": self.recipient,
            "removed": self.removed,
        }
        return {key: value for key, value in facts.items() if value is not None}


@dataclass(frozen=True)
class UnusableActivity:
    """An `event.activity[]` item that is not a complete transfer: what could be read of
    it (enough to tell whose it may be), and the first thing that is missing or wrong."""

    position: int
    network: str
    category: str | None
    sender: str | None
    recipient: str | None
    removed: bool
    nft: bool
    code: str    # the PayloadError code: missing_field, out_of_range, invalid_payload, ...
    defect: str  # its message, naming the field
    activity: Any = field(repr=False)

    event_id: None = None  # no trustworthy on-chain identity


Activity = ChainTransfer | UnusableActivity


@dataclass(frozen=True)
class AlchemyDelivery:
    delivery_id: str | None
    network: str | None
    activities: tuple[Activity, ...]
    notices: tuple[Notice, ...]  # payload-level: capacity errors, unsupported types

    def addresses(self) -> list[str]:
        """Every address that may belong to one of our users, for one lookup."""
        found = {a for t in self.activities for a in (t.sender, t.recipient) if a}
        return sorted(found)


@dataclass(frozen=True)
class Classified:
    events: tuple[PaymentEvent, ...]
    notices: tuple[Notice, ...]


def parse_delivery(obj: Any) -> AlchemyDelivery:
    """Validate an Alchemy payload; raise PayloadError naming the first broken field."""
    if not isinstance(obj, dict):
        raise PayloadError("the payload must be a JSON object")
    delivery_id = obj.get("id") if isinstance(obj.get("id"), str) else None
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise PayloadError("type is required and must be a string", code="missing_field")
    event = obj.get("event")
    if not isinstance(event, dict):
        raise PayloadError("event is required and must be an object", code="missing_field")
    if kind != ADDRESS_ACTIVITY:
        return AlchemyDelivery(delivery_id, None, (), (_payload_notice(
            NoticeKind.UNSUPPORTED, "unsupported_webhook_type", delivery_id,
            {"type": kind[:80], "delivery_id": delivery_id}),))
    if event.get("error"):
        # Alchemy could not produce the activity: acknowledge (a retry cannot help),
        # keep it so a reconciliation knows there is a gap to backfill.
        return AlchemyDelivery(delivery_id, None, (), (_payload_notice(
            NoticeKind.CAPACITY_ERROR, "capacity_error", delivery_id,
            {"error": event["error"], "delivery_id": delivery_id}),))
    network = _text(event, "network", "event.network", NETWORK_PATTERN)
    activities = event.get("activity")
    if not isinstance(activities, list):
        raise PayloadError("event.activity is required and must be a list",
                           code="missing_field")
    return AlchemyDelivery(delivery_id, network,
                           tuple(_activity(network, i, a) for i, a in enumerate(activities)),
                           ())


def classify(delivery: AlchemyDelivery, owners: Mapping[str, str]) -> Classified:
    """Deposit events for transfers into known addresses; a notice for everything else.

    `owners` maps a lowercased deposit address of the delivery's network to its user.
    """
    events: list[PaymentEvent] = []
    notices = list(delivery.notices)
    for transfer in delivery.activities:
        outcome = _classify_one(transfer, owners)
        if isinstance(outcome, PaymentEvent):
            events.append(outcome)
        else:
            kind, reason, extra = outcome
            notices.append(_transfer_notice(transfer, kind, reason, extra,
                                            delivery.delivery_id))
    return Classified(tuple(events), tuple(notices))


@dataclass(frozen=True, slots=True)
class AlchemyWrite(DeliveryWrite):
    """One Alchemy delivery's database work: who owns its addresses, then its events
    (through the outbox) and notices, all or nothing."""

    delivery: AlchemyDelivery
    trace_id: str

    def write(self, cur: Cursor) -> Recorded:
        owners = deposit_owners(cur, self.delivery.network, self.delivery.addresses())
        classified = classify(self.delivery, owners)
        return record(cur, classified.events, classified.notices, self.trace_id,
                      chain_events=True)

    @classmethod
    def write_together(cls, cur: Cursor, writes: Sequence[AlchemyWrite]
                       ) -> list[Recorded | IngestError]:
        """One after the other, with no multi-row form: a delivery is several events and
        notices. A conflict raises out of here (it may follow writes of the same
        delivery), and the store then writes the run one savepoint each."""
        return [w.write(cur) for w in writes]


def deposit_owners(cur: Cursor, network: str | None, addresses: Sequence[str]
                   ) -> dict[str, str]:
    """Lowercased deposit address -> user id, for the addresses of one delivery."""
    if network is None or not addresses:
        return {}
    cur.execute("SELECT address, user_id FROM deposit_addresses"
                " WHERE network = %s AND address = ANY(%s)", (network, list(addresses)))
    return dict(cur.fetchall())


NoticeFacts = tuple[NoticeKind, str, dict[str, Any]]


def _classify_one(t: Activity, owners: Mapping[str, str]) -> PaymentEvent | NoticeFacts:
    owner = _owner(t, owners)
    if not isinstance(owner, str):
        return owner
    user_id = owner
    if isinstance(t, UnusableActivity):
        # Creditable in kind and ours, but incomplete or out of range. Kept with its
        # user for review, not refused: the provider would resend the same bytes forever.
        reason = "out_of_range" if t.code == "out_of_range" else "unusable_activity"
        return NoticeKind.IGNORED, reason, {"user_id": user_id}
    if not t.raw_value:
        return NoticeKind.IGNORED, "zero_value", {"user_id": user_id}
    if t.decimals is None:
        return NoticeKind.IGNORED, "unknown_decimals", {"user_id": user_id}
    try:
        amount = from_base_units(t.raw_value, t.decimals)
    except AmountError as exc:
        # A true transfer we cannot hold exactly in NUMERIC(38,18): kept for review.
        return NoticeKind.IGNORED, "amount_not_representable", {"user_id": user_id,
                                                                "detail": str(exc)}
    chain = t.chain()
    try:
        # The check the ledger applies before it holds a chain deposit (a deposit the
        # finality watcher could not judge would be a dead letter there).
        ExpectedDeposit.from_chain(t.event_id, chain)
    except DepositError as exc:
        return NoticeKind.IGNORED, "unusable_chain_identity", {"user_id": user_id,
                                                               "detail": str(exc)}
    return PaymentEvent(event_id=t.event_id, event_type=EventType.DEPOSIT, user_id=user_id,
                        asset=t.asset, amount=amount, provider=PROVIDER, chain=chain)


def _owner(t: Activity, owners: Mapping[str, str]) -> str | NoticeFacts:
    """The user a transfer could credit, or why it can credit no one."""
    if t.removed:
        return NoticeKind.REORG, "log_removed", {}
    if t.nft:
        return NoticeKind.NFT, "nft_transfer", {}
    if t.category not in FUNGIBLE_TOKEN_CATEGORIES | NATIVE_CATEGORIES:
        return NoticeKind.UNSUPPORTED, "unsupported_category", {}
    user_id = owners.get(t.recipient) if t.recipient else None
    if user_id is None:
        outgoing = t.sender is not None and t.sender in owners
        return NoticeKind.IGNORED, "outgoing_transfer" if outgoing else "unknown_address", {}
    return user_id


def _activity(network: str, i: int, a: Any) -> Activity:
    try:
        return _transfer(network, i, a)
    except PayloadError as exc:
        return _unusable(network, i, a, exc)


def _unusable(network: str, i: int, a: Any, exc: PayloadError) -> UnusableActivity:
    """Read leniently what decides whose an activity may be: its category, addresses and
    removed flag; a value of the wrong form is taken as absent."""
    fields: dict[str, Any] = a if isinstance(a, dict) else {}
    raw_log = fields.get("log")
    log: dict[str, Any] = raw_log if isinstance(raw_log, dict) else {}
    category = fields.get("category") if isinstance(fields.get("category"), str) else None
    return UnusableActivity(
        position=i, network=network, category=category,
        sender=_lenient_address(fields.get("fromAddress")),
        recipient=_lenient_address(fields.get("toAddress")),
        removed=log.get("removed") is True, nft=_is_nft(fields, category), code=exc.code,
        defect=exc.detail, activity=a)


def _is_nft(a: dict[str, Any], category: str | None) -> bool:
    # Alchemy's own ERC-721 example says category "token" and tells the NFT by its token
    # id (and a rawValue of "0x"): an NFT is never a fungible amount, whatever the label.
    return (category in NFT_CATEGORIES or a.get("erc721TokenId") is not None
            or a.get("erc1155Metadata") is not None)


def _lenient_address(value: Any) -> str | None:
    try:
        return _address(value, "")
    except PayloadError:
        return None


def _transfer(network: str, i: int, a: Any) -> ChainTransfer:
    where = f"event.activity[{i}]"
    if not isinstance(a, dict):
        raise PayloadError(f"{where} must be an object")
    category = _text(a, "category", f"{where}.category", None)
    tx_hash = _text(a, "hash", f"{where}.hash", TX_HASH_PATTERN).lower()
    block_number = _hex_int(a.get("blockNum"), f"{where}.blockNum", required=True,
                            maximum=MAX_BLOCK_NUMBER)
    assert block_number is not None
    raw_contract = a.get("rawContract") or {}
    if not isinstance(raw_contract, dict):
        raise PayloadError(f"{where}.rawContract must be an object")
    log = a.get("log")
    if log is not None and not isinstance(log, dict):
        raise PayloadError(f"{where}.log must be an object")
    log = log or {}
    fungible = category in FUNGIBLE_TOKEN_CATEGORIES
    log_index = _hex_int(log.get("logIndex"), f"{where}.log.logIndex", required=fungible,
                         maximum=MAX_LOG_INDEX)
    trace = a.get("typeTraceAddress")
    if category == "internal" and trace is None:
        raise PayloadError(f"{where}.typeTraceAddress is required for internal transfers",
                           code="missing_field")
    if trace is not None and (not isinstance(trace, str) or not TRACE_PATTERN.fullmatch(trace)):
        raise PayloadError(f"{where}.typeTraceAddress has an invalid format")
    contract = _address(raw_contract.get("address"), f"{where}.rawContract.address")
    if fungible and contract is None:
        raise PayloadError(f"{where}.rawContract.address is required for token transfers",
                           code="missing_field")
    block_hash = log.get("blockHash")
    if block_hash is not None and (not isinstance(block_hash, str)
                                   or not TX_HASH_PATTERN.fullmatch(block_hash)):
        raise PayloadError(f"{where}.log.blockHash must be 0x followed by 64 hex digits")
    removed = log.get("removed", False)
    if not isinstance(removed, bool):
        raise PayloadError(f"{where}.log.removed must be a boolean")
    transfer = ChainTransfer(
        position=i, network=network, category=category, tx_hash=tx_hash,
        block_number=block_number,
        block_hash=block_hash.lower() if block_hash else None,
        sender=_address(a.get("fromAddress"), f"{where}.fromAddress"),
        recipient=_address(a.get("toAddress"), f"{where}.toAddress"),
        log_index=log_index,
        trace_address=trace if category == "internal" else None,
        token_contract=contract if fungible else None,
        raw_value=_hex_int(raw_contract.get("rawValue"), f"{where}.rawContract.rawValue",
                           required=False, maximum=MAX_RAW_VALUE),
        decimals=_decimals(raw_contract.get("decimals"), f"{where}.rawContract.decimals"),
        removed=removed, nft=_is_nft(a, category), activity=a,
    )
    event_id = transfer.event_id
    if len(event_id) > MAX_DEPOSIT_EVENT_ID or not EVENT_ID_PATTERN.fullmatch(event_id):
        raise PayloadError(f"{where} makes the event id {event_id[:80]!r}…, longer than "
                           f"{MAX_DEPOSIT_EVENT_ID} characters", code="out_of_range")
    return transfer


def _text(obj: dict[str, Any], key: str, where: str, pattern: re.Pattern[str] | None) -> str:
    value = obj.get(key)
    if value is None:
        raise PayloadError(f"{where} is required", code="missing_field")
    if not isinstance(value, str):
        raise PayloadError(f"{where} must be a string")
    if pattern is not None and not pattern.fullmatch(value):
        raise PayloadError(f"{where} has an invalid format: {value[:80]!r}")
    return value


def _hex_int(value: Any, where: str, *, required: bool,
             maximum: int | None = None) -> int | None:
    """A "0x…" quantity (or a JSON integer), at most `maximum`; "0x" alone means no
    value (NFTs)."""
    if value is None:
        if required:
            raise PayloadError(f"{where} is required", code="missing_field")
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        number = value
    elif not isinstance(value, str) or not HEX_PATTERN.fullmatch(value):
        raise PayloadError(f"{where} must be a 0x-prefixed hex quantity")
    elif value in ("0x", "0X"):
        if required:
            raise PayloadError(f"{where} is empty", code="missing_field")
        return None
    else:
        number = int(value, 16)
    if maximum is not None and number > maximum:
        raise PayloadError(f"{where} is beyond {maximum}, the largest we can store",
                           code="out_of_range")
    return number


def _decimals(value: Any, where: str) -> int | None:
    """Token decimals: an int in Alchemy's examples, a hex string in its docs."""
    if value is None:
        return None
    decimals: int | None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 3:
        decimals = int(value)
    else:
        decimals = _hex_int(value, where, required=False)
    if decimals is None or decimals > 255:
        raise PayloadError(f"{where} must be an integer between 0 and 255")
    return decimals


def _address(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not ADDRESS_PATTERN.fullmatch(value.removeprefix("0x")):
        raise PayloadError(f"{where} is not an address")
    return value.lower()


def _payload_notice(kind: NoticeKind, reason: str, delivery_id: str | None,
                    detail: dict[str, Any]) -> Notice:
    detail = _storable(detail)
    return Notice(notice_id=notice_id(PROVIDER, kind, detail), provider=PROVIDER, kind=kind,
                  reason=reason, detail=detail, delivery_id=delivery_id)


def _storable(value: Any) -> Any:
    """`value` with every non-finite float as text: the parser reads 1e400 as infinity,
    which jsonb cannot hold, and a notice must be stored whatever field carried it."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(v) for v in value]
    return value


def _transfer_notice(t: Activity, kind: NoticeKind, reason: str,
                     extra: dict[str, Any], delivery_id: str | None) -> Notice:
    # The activity itself (not the delivery) identifies the notice: the same transfer
    # in a retried or another payload is recorded once.
    detail = {"network": t.network, "activity": _storable(t.activity), **extra}
    if isinstance(t, UnusableActivity):
        detail["defect"] = t.defect
    return Notice(notice_id=notice_id(PROVIDER, kind, {"network": t.network,
                                                      "activity": t.activity}),
                  provider=PROVIDER, kind=kind, reason=reason, detail=detail,
                  event_id=t.event_id, delivery_id=delivery_id)
