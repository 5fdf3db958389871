"""What the chain says about a transaction, as plain frozen values.

The RPC client turns JSON-RPC results into these; verify.py judges deposits against
them. Nothing here imports web3, so the verdict logic is testable without a node.
Hex text is lowercased once, here, so comparisons elsewhere are plain `==`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# keccak256("Transfer(address,address,uint256)"): topic0 of every ERC-20 Transfer log.
TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"


class MalformedResultError(ValueError):
    """A node answered with something that is not a well-formed receipt/block."""


@dataclass(frozen=True)
class BlockRef:
    number: int
    hash: str


@dataclass(frozen=True)
class LogEntry:
    log_index: int  # position in the BLOCK (not in the transaction)
    address: str
    topics: tuple[str, ...]
    data: str
    removed: bool = False


@dataclass(frozen=True)
class Receipt:
    tx_hash: str
    block_number: int
    block_hash: str
    status: int  # 1 success, 0 reverted
    sender: str
    to: str | None  # None for a contract creation
    logs: tuple[LogEntry, ...]

    @property
    def block(self) -> BlockRef:
        return BlockRef(self.block_number, self.block_hash)


@dataclass(frozen=True)
class Transaction:
    """The parts of a transaction a native-coin deposit is checked against (a receipt
    has no `value`)."""

    tx_hash: str
    block_number: int | None  # None while pending
    block_hash: str | None
    sender: str
    to: str | None
    value: int


@dataclass(frozen=True)
class BlockEvidence:
    """One canonical block: its receipts, and its transactions when native deposits in
    it need their values."""

    block: BlockRef
    receipts: Mapping[str, Receipt]  # by tx hash
    transactions: Mapping[str, Transaction] | None = None


def quantity(value: Any, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.startswith(("0x", "0X")):
        try:
            return int(value, 16)
        except ValueError:
            pass
    raise MalformedResultError(f"{what} is not a hex quantity: {value!r}")


def _hex(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.startswith("0x"):
        raise MalformedResultError(f"{what} is not 0x-hex: {value!r}")
    return value.lower()


def _opt_hex(value: Any, what: str) -> str | None:
    return None if value is None else _hex(value, what)


def parse_log(obj: Mapping[str, Any]) -> LogEntry:
    return LogEntry(
        log_index=quantity(obj.get("logIndex"), "log.logIndex"),
        address=_hex(obj.get("address"), "log.address"),
        topics=tuple(_hex(t, "log.topics[]") for t in obj.get("topics") or ()),
        data=_hex(obj.get("data", "0x"), "log.data"),
        removed=bool(obj.get("removed", False)),
    )


def parse_receipt(obj: Mapping[str, Any]) -> Receipt:
    if not isinstance(obj, Mapping):
        raise MalformedResultError(f"receipt is not an object: {type(obj).__name__}")
    status = obj.get("status")
    return Receipt(
        tx_hash=_hex(obj.get("transactionHash"), "receipt.transactionHash"),
        block_number=quantity(obj.get("blockNumber"), "receipt.blockNumber"),
        block_hash=_hex(obj.get("blockHash"), "receipt.blockHash"),
        # Pre-Byzantium receipts have no status; none of our networks is that old.
        status=quantity(status, "receipt.status") if status is not None else 0,
        sender=_hex(obj.get("from"), "receipt.from"),
        to=_opt_hex(obj.get("to"), "receipt.to"),
        logs=tuple(parse_log(entry) for entry in obj.get("logs") or ()),
    )


def parse_transaction(obj: Mapping[str, Any]) -> Transaction:
    if not isinstance(obj, Mapping):
        raise MalformedResultError(f"transaction is not an object: {type(obj).__name__}")
    number = obj.get("blockNumber")
    return Transaction(
        tx_hash=_hex(obj.get("hash"), "tx.hash"),
        block_number=quantity(number, "tx.blockNumber") if number is not None else None,
        block_hash=_opt_hex(obj.get("blockHash"), "tx.blockHash"),
        sender=_hex(obj.get("from"), "tx.from"),
        to=_opt_hex(obj.get("to"), "tx.to"),
        value=quantity(obj.get("value", "0x0"), "tx.value"),
    )


def parse_block_ref(obj: Mapping[str, Any]) -> BlockRef:
    if not isinstance(obj, Mapping):
        raise MalformedResultError(f"block is not an object: {type(obj).__name__}")
    return BlockRef(quantity(obj.get("number"), "block.number"),
                    _hex(obj.get("hash"), "block.hash"))
