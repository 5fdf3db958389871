"""Finality watcher settings, one frozen object per network, from the environment.

  PAYSTREAM_FINALITY_NETWORKS        comma list of provider network names; default
                                     ETH_MAINNET
  ETH_RPC_URL_<NETWORK>              the node for that network (e.g. ETH_RPC_URL_ETH_MAINNET);
  ETH_RPC_URL                        the fallback for every network without its own;
                                     default: the local anvil (PAYSTREAM_ANVIL_PORT)
  PAYSTREAM_FINALITY_CONFIRMATIONS_<NETWORK>
                                     a confirmation depth for a network whose node has no
                                     `finalized` tag; unset: use the tag
  PAYSTREAM_FINALITY_CREDIT_DEPTH_<NETWORK>
                                     credit a deposit once it is N blocks deep (head - N),
                                     before finality; re-checked until final, reversed if
                                     a reorg removes it. Unset: credit on finality only.
                                     An integer >= 1, below the confirmations depth when
                                     that is set (deeper would never come before finality)
  PAYSTREAM_FINALITY_TICK_SECONDS    1.0
  PAYSTREAM_FINALITY_RPC_TIMEOUT     5.0 seconds per call
  PAYSTREAM_FINALITY_BREAKER         failures/window/cooldown, default 5/30/10
  PAYSTREAM_FINALITY_BATCH_LIMIT     pending deposits judged per tick, default 10000
  PAYSTREAM_FINALITY_REORG_GRACE_BLOCKS
                                     finalized blocks past a deposit's reported block
                                     before a MISSING transaction is judged reorged
                                     (it may be re-mined); default 8
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from paystream.finality.breaker import BreakerPolicy


def _env(name: str, default: str) -> str:
    return os.environ.get(name) or default


@dataclass(frozen=True)
class NetworkSettings:
    network: str
    rpc_url: str
    confirmations: int | None  # None: the node's `finalized` tag
    tick_seconds: float
    rpc_timeout: float
    breaker: BreakerPolicy
    batch_limit: int
    reorg_grace_blocks: int = 8
    credit_depth: int | None = None  # None: credit on finality only

    @property
    def finalized_ttl(self) -> float:
        # Cache the finalized block for half a tick: a tick reads it once, and a fresh
        # value is fetched by the next tick (so the credit lags finality by <= 1 tick).
        return self.tick_seconds / 2


def _breaker(text: str) -> BreakerPolicy:
    try:
        failures, window, cooldown = text.split("/")
        return BreakerPolicy(int(failures), float(window), float(cooldown))
    except ValueError as exc:
        raise ValueError(f"PAYSTREAM_FINALITY_BREAKER must be N/window/cooldown: {text!r}"
                         ) from exc


def from_env() -> list[NetworkSettings]:
    default_url = _env("ETH_RPC_URL",
                       f"http://127.0.0.1:{_env('PAYSTREAM_ANVIL_PORT', '8545')}")
    networks = [n.strip() for n in _env("PAYSTREAM_FINALITY_NETWORKS", "ETH_MAINNET")
                .split(",") if n.strip()]
    tick = float(_env("PAYSTREAM_FINALITY_TICK_SECONDS", "1.0"))
    timeout = float(_env("PAYSTREAM_FINALITY_RPC_TIMEOUT", "5.0"))
    if timeout >= tick * 10:
        # A hung node must not hold a tick for many ticks' worth of time.
        raise ValueError("PAYSTREAM_FINALITY_RPC_TIMEOUT must be below 10 ticks")
    breaker = _breaker(_env("PAYSTREAM_FINALITY_BREAKER", "5/30/10"))
    limit = int(_env("PAYSTREAM_FINALITY_BATCH_LIMIT", "10000"))
    grace = int(_env("PAYSTREAM_FINALITY_REORG_GRACE_BLOCKS", "8"))
    result = []
    for network in networks:
        depth = os.environ.get(f"PAYSTREAM_FINALITY_CONFIRMATIONS_{network}")
        confirmations = int(depth) if depth else None
        result.append(NetworkSettings(
            network=network, rpc_url=_env(f"ETH_RPC_URL_{network}", default_url),
            confirmations=confirmations, tick_seconds=tick,
            rpc_timeout=timeout, breaker=breaker, batch_limit=limit,
            reorg_grace_blocks=grace,
            credit_depth=credit_depth(network, confirmations)))
    return result


def credit_depth(network: str, confirmations: int | None) -> int | None:
    """PAYSTREAM_FINALITY_CREDIT_DEPTH_<network>, validated; None when unset."""
    name = f"PAYSTREAM_FINALITY_CREDIT_DEPTH_{network}"
    text = (os.environ.get(name) or "").strip()
    if not text:
        return None
    try:
        depth = int(text)
    except ValueError:
        raise ValueError(f"{name} must be an integer number of blocks: {text!r}") from None
    if depth < 1:
        # 0 would credit a deposit in the head block, which the next block may replace.
        raise ValueError(f"{name} must be >= 1, got {depth}")
    if confirmations is not None and depth >= confirmations:
        raise ValueError(f"{name}={depth} must be below the finality depth "
                         f"PAYSTREAM_FINALITY_CONFIRMATIONS_{network}={confirmations}")
    return depth
