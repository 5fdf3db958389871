"""The chain scanner's pure part: blocks and logs in, the deposits they hold out.

What a scan of blocks first..last reads (service.py makes the calls):
  - every block with its transactions: a transaction with a value to a deposit address
    is a native deposit (`external`), once its receipt says it succeeded;
  - the ERC-20 `Transfer` logs of the range, from every contract (one eth_getLogs on the
    topic alone, whatever the number of addresses): a log whose recipient is a deposit
    address is a token deposit.
Internal transfers (native coin moved by a contract call) need traces, which this scan
does not read: those still come from the provider's webhook only.

A found transfer is named exactly as the webhook path names it
(schema.chain.deposit_event_id) and carries the same `chain` facts, so either report
of one transfer is the same event to the ingest and the ledger. Its event's occurred_at
is its block's timestamp (when it was paid: an invoice's deadline is judged on it), which
the webhook's event lacks: the ingest does not tell two reports apart by it
(schema.chain.scanned_same_transfer).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from paystream.finality.evidence import (
    TRANSFER_TOPIC,
    BlockRef,
    MalformedResultError,
    parse_block_ref,
    parse_log,
    parse_transaction,
    quantity,
)
from paystream.schema.amounts import AmountError, from_base_units
from paystream.schema.chain import (
    SCANNER_PROVIDER,
    DepositError,
    ExpectedDeposit,
    deposit_asset,
    deposit_event_id,
)
from paystream.schema.events import EventType, PaymentEvent

NATIVE_DECIMALS = 18
# ERC-20 `decimals()` selector, for the amount of a token deposit.
DECIMALS_CALL = "0x313ce567"


@dataclass(frozen=True)
class FoundTransfer:
    """A transfer into one of our addresses, as the chain shows it."""

    network: str
    tx_hash: str
    block_number: int
    block_hash: str
    sender: str
    recipient: str
    raw_value: int
    token_contract: str | None = None  # None: the native coin
    log_index: int | None = None  # a token log's index in its block
    block_time: int | None = None  # the block's timestamp, Unix seconds

    @property
    def occurred_at(self) -> str | None:
        """The block's time as ISO 8601 UTC (the event's occurred_at)."""
        if self.block_time is None:
            return None
        return datetime.fromtimestamp(self.block_time, UTC).isoformat().replace("+00:00", "Z")

    @property
    def event_id(self) -> str:
        return deposit_event_id(self.network, self.tx_hash, log_index=self.log_index)

    @property
    def asset(self) -> str:
        return deposit_asset(self.network, self.token_contract)

    def chain(self, decimals: int) -> dict[str, Any]:
        """PaymentEvent.chain in the shape the webhook path writes (ingest.alchemy's
        ChainTransfer.chain): the finality watcher and the ledger read it the same way."""
        facts: dict[str, Any] = {
            "network": self.network,
            "category": "erc20" if self.token_contract else "external",
            "tx_hash": self.tx_hash,
            "block_number": self.block_number,
            "block_hash": self.block_hash,
            "log_index": self.log_index,
            "token_contract": self.token_contract,
            "raw_value": hex(self.raw_value),
            "decimals": decimals,
            "sender": self.sender,
            "recipient": self.recipient,
            "removed": False,
        }
        return {key: value for key, value in facts.items() if value is not None}

    def event(self, user_id: str, decimals: int) -> PaymentEvent | None:
        """The deposit event for `user_id`; None when it can credit nothing (a zero value,
        an amount NUMERIC(38,18) cannot hold exactly, a chain identity the ledger would
        refuse: the webhook path keeps those as notices, never as events)."""
        if not self.raw_value:
            return None
        try:
            amount = from_base_units(self.raw_value, decimals)
        except AmountError:
            return None
        chain = self.chain(decimals)
        try:
            ExpectedDeposit.from_chain(self.event_id, chain)  # the ledger's own check
        except DepositError:
            return None
        return PaymentEvent(event_id=self.event_id, event_type=EventType.DEPOSIT,
                            user_id=user_id, asset=self.asset, amount=amount,
                            provider=SCANNER_PROVIDER, occurred_at=self.occurred_at,
                            chain=chain)


def token_transfer(network: str, raw: Mapping[str, Any]) -> FoundTransfer | None:
    """An eth_getLogs entry as an ERC-20 transfer; None for anything else on the same
    topic (an ERC-721 Transfer indexes its token id: four topics, no data) and for a
    log the node marks removed."""
    log = parse_log(raw)
    if log.removed or len(log.topics) != 3 or log.topics[0] != TRANSFER_TOPIC:
        return None
    if len(log.data) != 2 + 64:
        return None
    return FoundTransfer(
        network=network,
        tx_hash=_hex(raw.get("transactionHash"), "log.transactionHash"),
        block_number=quantity(raw.get("blockNumber"), "log.blockNumber"),
        block_hash=_hex(raw.get("blockHash"), "log.blockHash"),
        sender=_topic_address(log.topics[1]), recipient=_topic_address(log.topics[2]),
        raw_value=int(log.data, 16), token_contract=log.address, log_index=log.log_index)


def native_transfers(network: str, block: Mapping[str, Any]) -> tuple[BlockRef,
                                                                      list[FoundTransfer]]:
    """A full block (eth_getBlockByNumber with transactions): its ref, and every
    transaction that moves native coin to an address (a contract creation moves it to
    no address). Whether it succeeded is in its receipt: the caller checks."""
    ref = parse_block_ref(block)
    at = block_time(block)
    found = []
    for raw in block.get("transactions") or ():
        if not isinstance(raw, Mapping):
            raise MalformedResultError("block.transactions must hold objects")
        tx = parse_transaction(raw)
        if tx.to is None or tx.value == 0:
            continue
        found.append(FoundTransfer(network=network, tx_hash=tx.tx_hash,
                                   block_number=ref.number, block_hash=ref.hash,
                                   sender=tx.sender, recipient=tx.to, raw_value=tx.value,
                                   block_time=at))
    return ref, found


def block_time(block: Mapping[str, Any]) -> int | None:
    """A block's `timestamp` (Unix seconds); None when the node gave none usable (the
    deposit then has no occurred_at: its time is when the ledger sees it)."""
    raw = block.get("timestamp")
    if not isinstance(raw, str):
        return None
    try:
        value = int(raw, 16)
    except ValueError:
        return None
    return value if 0 < value < 2**40 else None


def ours(transfers: Iterable[FoundTransfer], owners: Mapping[str, str]
         ) -> list[tuple[FoundTransfer, str]]:
    """The transfers into a deposit address, with the address's user."""
    return [(t, owners[t.recipient]) for t in transfers if t.recipient in owners]


def decimals_answer(result: str | None) -> int | None:
    """A `decimals()` eth_call answer as 0..255; None when the contract gave none."""
    if result is None or len(result) != 2 + 64:
        return None
    try:
        value = int(result, 16)
    except ValueError:
        return None
    return value if value <= 255 else None


# Answered ranges in a row before a halved range is doubled again: a node that refuses
# a size keeps refusing it, and each refusal costs a call and counts against the breaker.
GROW_AFTER = 16


@dataclass
class RangeSizer:
    """How many blocks one eth_getLogs call covers: at most `limit`, halved when the node
    refuses a range (too many results, or a range cap), doubled back after GROW_AFTER
    ranges it answered in a row. One call's answer stays bounded by what the node
    accepts."""

    limit: int
    size: int = 0
    answered_in_a_row: int = 0

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError("a scan range is at least one block")
        self.size = self.size or self.limit

    def next_range(self, start: int, end: int) -> tuple[int, int] | None:
        """The next range from `start`, never past `end`; None when start > end."""
        if start > end:
            return None
        return start, min(end, start + self.size - 1)

    def refused(self) -> bool:
        """The node refused the last range: halve it. False when it was one block."""
        self.answered_in_a_row = 0
        if self.size == 1:
            return False
        self.size = max(1, self.size // 2)
        return True

    def answered(self) -> None:
        self.answered_in_a_row += 1
        if self.size < self.limit and self.answered_in_a_row >= GROW_AFTER:
            self.size = min(self.limit, self.size * 2)
            self.answered_in_a_row = 0


def ranges(start: int, end: int, size: int) -> Iterator[tuple[int, int]]:
    """first..last pairs of at most `size` blocks covering start..end."""
    sizer = RangeSizer(size)
    while (span := sizer.next_range(start, end)) is not None:
        yield span
        start = span[1] + 1


def _topic_address(topic: str) -> str:
    # An indexed address is left-padded to 32 bytes.
    return "0x" + topic[-40:]


def _hex(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.startswith("0x"):
        raise MalformedResultError(f"{what} is not 0x-hex: {value!r}")
    return value.lower()
