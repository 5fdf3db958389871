"""Chain scanner settings, one frozen object per network, from the environment.

The scanner reads the networks the finality watcher watches, through the same settings
(finality.settings: PAYSTREAM_FINALITY_NETWORKS, ETH_RPC_URL_<NETWORK>, the RPC timeout
and breaker, the confirmations and credit depths), and adds its own:

  PAYSTREAM_SCANNER_POLL_SECONDS     2.0: the wait between passes once caught up
  PAYSTREAM_SCANNER_RANGE_BLOCKS     100: the most blocks one pass (one eth_getLogs call,
                                     one transaction) covers; halved while the node
                                     refuses a range, never above this
  PAYSTREAM_SCANNER_REWIND_BLOCKS    64: how far below its cursor the scanner starts again
                                     when the cursor's block was reorganised away
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from paystream.finality import settings as finality_settings
from paystream.finality.settings import NetworkSettings


@dataclass(frozen=True)
class ScanSettings:
    chain: NetworkSettings  # the network, its node, timeouts, breaker and depths
    poll_seconds: float = 2.0
    range_blocks: int = 100
    rewind_blocks: int = 64

    @property
    def network(self) -> str:
        return self.chain.network


def _positive(name: str, default: str, kind: type[int] | type[float]) -> float:
    text = (os.environ.get(name) or default).strip()
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{name} must be a number: {text!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {text}")
    return value


def from_env(networks: Sequence[str] | None = None) -> list[ScanSettings]:
    """One ScanSettings per finality network (or per one of `networks`: the command's
    --network, which stands for PAYSTREAM_FINALITY_NETWORKS as it does for the
    watcher); ValueError names a bad setting."""
    if networks:
        os.environ["PAYSTREAM_FINALITY_NETWORKS"] = ",".join(networks)
    poll = _positive("PAYSTREAM_SCANNER_POLL_SECONDS", "2.0", float)
    range_blocks = int(_positive("PAYSTREAM_SCANNER_RANGE_BLOCKS", "100", int))
    rewind = int(_positive("PAYSTREAM_SCANNER_REWIND_BLOCKS", "64", int))
    return [ScanSettings(chain=network, poll_seconds=poll, range_blocks=range_blocks,
                         rewind_blocks=rewind)
            for network in finality_settings.from_env()]
