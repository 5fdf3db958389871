"""A chain deposit's on-chain identity: what the ledger holds and the finality watcher judges.

Both sides read it from PaymentEvent.chain (written by ingest/alchemy.py): the ledger
refuses a deposit whose identity is unusable (a dead letter, before any money moves), and
the watcher looks the same transfer up on the chain. One definition, so the two can never
disagree on what a deposit is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# A network's name (ETH_MAINNET) and a deposit address: what a chain provider reports
# and what users and addresses are registered with (schema/users.py).
NETWORK_PATTERN = re.compile(r"[A-Z0-9_]{1,64}")
# EVM addresses are 0x + 40 hex; other chains' are alphanumeric. Lowercased for lookup.
ADDRESS_PATTERN = re.compile(r"[A-Za-z0-9]{20,128}")

# The `provider` of the deposits the chain scanner (paystream.finality.scanner.blocks) finds.
SCANNER_PROVIDER = "scanner"
# What each provider words its own way about one transfer (Alchemy says "token" or
# "erc20", carries a block hash only on token logs, knows decimals from its metadata):
# never part of what makes two reports the same transfer.
DESCRIPTIVE_FIELDS = frozenset({"category", "decimals", "sender", "block_hash"})
# Where a transfer is: a reorg may re-mine it elsewhere under the same event id, so
# these may change between two reports of one transfer; nothing else may.
BLOCK_FIELDS = frozenset({"block_number", "block_hash", "removed"})


def deposit_event_id(network: str, tx_hash: str, *, log_index: int | None = None,
                     trace_address: str | None = None) -> str:
    """A chain deposit's event id: its on-chain identity, whoever reports it.

    A token log is `<network>:<tx>:log:<index>`, an internal transfer
    `<network>:<tx>:trace:<address>`, a top-level native transfer `<network>:<tx>:external`.
    The webhook path and the chain scanner both name a transfer with it, so the second
    report of one transfer is the same event id, never a second credit.
    """
    base = f"{network}:{tx_hash.lower()}"
    if log_index is not None:
        return f"{base}:log:{log_index}"
    if trace_address is not None:
        return f"{base}:trace:{trace_address}"
    return f"{base}:external"


def deposit_asset(network: str, token_contract: str | None) -> str:
    """The asset a chain deposit credits: `<network>:<token contract>` or `<network>:native`."""
    return f"{network}:{token_contract or 'native'}"


def scanned_same_transfer(stored: Mapping[str, Any], reported: Mapping[str, Any], *,
                          any_block: bool = False) -> bool:
    """Whether `stored` (a payment event's wire form) is the chain scanner's record of the
    very transfer `reported` (a provider's deposit event with the same event id) reports:
    the same user, asset, amount and on-chain facts in the same block, told apart only by
    the provider, its own wording (DESCRIPTIVE_FIELDS) and the time (the scanner's
    events carry their block's, a webhook's none). The ingest then answers the
    provider's report as a duplicate: one transfer, one event, one credit.

    `any_block`: the same transfer, in whatever block (a reorg re-mined it): the ingest
    keeps the scanner's event and records a reorg notice, as between two reports of one
    provider.
    """
    if stored.get("provider") != SCANNER_PROVIDER:
        return False
    stored_chain, reported_chain = stored.get("chain"), reported.get("chain")
    if not isinstance(stored_chain, Mapping) or not isinstance(reported_chain, Mapping):
        return False
    hashes = (stored_chain.get("block_hash"), reported_chain.get("block_hash"))
    if not any_block and None not in hashes and hashes[0] != hashes[1]:
        return False
    ignored = DESCRIPTIVE_FIELDS | (BLOCK_FIELDS if any_block else frozenset())
    return (_facts(stored) == _facts(reported)
            and _chain_facts(stored_chain, ignored) == _chain_facts(reported_chain, ignored))


def _facts(wire: Mapping[str, Any]) -> dict[str, Any]:
    # occurred_at: the scanner's is its block's time, a webhook's event has none.
    return {k: v for k, v in wire.items() if k not in ("provider", "chain", "occurred_at")}


def _chain_facts(chain: Mapping[str, Any], ignored: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in chain.items() if k not in ignored}


class DepositKind(StrEnum):
    TOKEN = "token"  # an ERC-20 Transfer log
    EXTERNAL = "external"  # a top-level native-coin transaction
    INTERNAL = "internal"  # native coin moved by a contract call


class DepositError(ValueError):
    """A chain deposit whose identity is unusable (a bug upstream, not a reorg)."""


@dataclass(frozen=True)
class ExpectedDeposit:
    """A chain deposit as the provider reported it."""

    event_id: str
    network: str
    kind: DepositKind
    tx_hash: str
    block_number: int
    block_hash: str | None  # only token logs carry one in Alchemy payloads
    recipient: str
    raw_value: int
    token_contract: str | None = None
    log_index: int | None = None
    trace_address: str | None = None

    @classmethod
    def from_chain(cls, event_id: str, chain: Mapping[str, Any]) -> ExpectedDeposit:
        """From PaymentEvent.chain (ingest/alchemy.py's ChainTransfer.chain())."""
        try:
            category = chain["category"]
            if chain.get("log_index") is not None:
                kind = DepositKind.TOKEN
            elif category == "internal":
                kind = DepositKind.INTERNAL
            elif category == "external":
                kind = DepositKind.EXTERNAL
            else:
                raise DepositError(f"{event_id}: unsupported category {category!r}")
            raw = chain["raw_value"]
            raw_value = int(raw, 16) if isinstance(raw, str) else int(raw)
            deposit = cls(
                event_id=event_id, network=str(chain["network"]), kind=kind,
                tx_hash=str(chain["tx_hash"]).lower(),
                block_number=int(chain["block_number"]),
                block_hash=_lower(chain.get("block_hash")),
                recipient=str(chain["recipient"]).lower(), raw_value=raw_value,
                token_contract=_lower(chain.get("token_contract")),
                log_index=chain.get("log_index"),
                trace_address=chain.get("trace_address"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, DepositError):
                raise
            raise DepositError(f"{event_id}: unusable chain identity: {exc!r}") from exc
        if kind is DepositKind.TOKEN and deposit.token_contract is None:
            raise DepositError(f"{event_id}: a token deposit needs token_contract")
        return deposit

    @property
    def needs_transaction(self) -> bool:
        """Native-coin value is in the transaction, not the receipt."""
        return self.kind is DepositKind.EXTERNAL


def _lower(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) else None
