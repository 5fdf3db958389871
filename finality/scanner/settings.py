"""Chain scanner settings, one frozen object per network, from the environment.

The scanner reads the networks the finality watcher watches, through the same settings
(finality.settings: PAYSTREAM_FINALITY_NETWORKS, ETH_RPC_URL_<NETWORK>, the RPC timeout
and breaker, the confirmations and credit depths), and adds its own (ScannerSettings).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import Field

from paystream.env import EnvSettings
from paystream.finality import settings as finality_settings
from paystream.finality.settings import NetworkSettings


class ScannerSettings(EnvSettings):
    """The chain scanner (`paystream consume scanner`, `paystream chain scan`:
    [finality](finality.md#the-chain-scanner)) reads the networks, nodes, RPC timeout,
    breaker and depths above, and these."""

    doc_section = "Finality watcher"

    poll_seconds: float = Field(2.0, alias="PAYSTREAM_SCANNER_POLL_SECONDS", gt=0,
                                description="the wait between passes once caught up")
    range_blocks: int = Field(
        100, alias="PAYSTREAM_SCANNER_RANGE_BLOCKS", gt=0,
        description="the most blocks one pass reads (one `eth_getLogs` call, one "
                    "transaction); halved while the node refuses a range, never above this")
    rewind_blocks: int = Field(
        64, alias="PAYSTREAM_SCANNER_REWIND_BLOCKS", gt=0,
        description="how far below its cursor the scanner starts again when a reorg "
                    "replaced the cursor's block")


@dataclass(frozen=True)
class ScanSettings:
    chain: NetworkSettings  # the network, its node, timeouts, breaker and depths
    poll_seconds: float
    range_blocks: int
    rewind_blocks: int

    @property
    def network(self) -> str:
        return self.chain.network


def from_env(networks: Sequence[str] | None = None) -> list[ScanSettings]:
    """One ScanSettings per finality network (or per one of `networks`: the command's
    --network, which stands for PAYSTREAM_FINALITY_NETWORKS as it does for the
    watcher); SettingsError (a ValueError) names a bad setting."""
    own = ScannerSettings.from_env()
    return [ScanSettings(chain=network, poll_seconds=own.poll_seconds,
                         range_blocks=own.range_blocks, rewind_blocks=own.rewind_blocks)
            for network in finality_settings.from_env(networks=tuple(networks or ()))]
