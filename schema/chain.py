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
