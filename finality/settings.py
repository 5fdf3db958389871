"""Finality watcher settings: the variables declared once (FinalitySettings), and one
frozen object per network built from them (NetworkSettings).

A network's own variables are a family named after it (ETH_RPC_URL_<NETWORK>,
PAYSTREAM_FINALITY_CONFIRMATIONS_<NETWORK>, PAYSTREAM_FINALITY_CREDIT_DEPTH_<NETWORK>),
read for each network PAYSTREAM_FINALITY_NETWORKS names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Self

from pydantic import BeforeValidator, Field, model_validator
from pydantic_settings import NoDecode

from paystream.env import Documented, EnvSettings, SettingsError, Words
from paystream.finality.breaker import BreakerPolicy
from paystream.local_chain import AnvilSettings


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


def _breaker(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        failures, window, cooldown = value.split("/")
        return BreakerPolicy(int(failures), float(window), float(cooldown))
    except ValueError:
        raise SettingsError(f"PAYSTREAM_FINALITY_BREAKER must be N/window/cooldown: "
                            f"{value!r}") from None


Breaker = Annotated[BreakerPolicy, NoDecode, BeforeValidator(_breaker)]


class FinalitySettings(EnvSettings):
    """Read by `paystream consume finality` ([finality](finality.md)). A value it cannot
    use stops it at start with exit code 2."""

    doc_section = "Finality watcher"
    doc_extra = (
        Documented("ETH_RPC_URL_<NETWORK>", "text", "`ETH_RPC_URL`",
                   "the node of one network"),
        Documented("PAYSTREAM_FINALITY_CONFIRMATIONS_<NETWORK>", "integer",
                   "unset: the node's `finalized` tag",
                   "a confirmation depth, for a node without the tag"),
        Documented("PAYSTREAM_FINALITY_CREDIT_DEPTH_<NETWORK>", "integer",
                   "unset: credit on finality only",
                   "credit a deposit N blocks deep (head − N), before finality; re-checked "
                   "until final, reversed if a reorg removes it. ≥ 1, below the "
                   "confirmation depth when that is set (deeper would never come first)"),
    )

    networks: Words = Field(("ETH_MAINNET",), alias="PAYSTREAM_FINALITY_NETWORKS",
                            description="comma list of the provider network names to watch "
                                        "(`--network` overrides)")
    eth_rpc_url: str | None = Field(
        None, alias="ETH_RPC_URL",
        json_schema_extra={"shown": "`http://127.0.0.1:` + `PAYSTREAM_ANVIL_PORT`"},
        description="the node of every network without its own")
    tick_seconds: float = Field(1.0, alias="PAYSTREAM_FINALITY_TICK_SECONDS", gt=0,
                                description="the tick")
    rpc_timeout: float = Field(5.0, alias="PAYSTREAM_FINALITY_RPC_TIMEOUT", gt=0,
                               description="seconds per RPC call; must stay below 10 ticks")
    breaker: Breaker = Field(
        BreakerPolicy(5, 30.0, 10.0), alias="PAYSTREAM_FINALITY_BREAKER",
        json_schema_extra={"shown": "`5/30/10`", "type": "N/window/cooldown"},
        description="circuit breaker: failures / window seconds / cool-down seconds")
    batch_limit: int = Field(10_000, alias="PAYSTREAM_FINALITY_BATCH_LIMIT", ge=1,
                             description="pending deposits judged per tick")
    reorg_grace_blocks: int = Field(
        8, alias="PAYSTREAM_FINALITY_REORG_GRACE_BLOCKS", ge=0,
        description="finalized blocks past a deposit's reported block a missing "
                    "transaction gets to be re-mined before it is judged reorged")

    @model_validator(mode="after")
    def _timeout_within_ticks(self) -> Self:
        if self.rpc_timeout >= self.tick_seconds * 10:
            # A hung node must not hold a tick for many ticks' worth of time.
            raise SettingsError("PAYSTREAM_FINALITY_RPC_TIMEOUT must be below 10 ticks, got "
                                f"{self.rpc_timeout:g} with PAYSTREAM_FINALITY_TICK_SECONDS "
                                f"{self.tick_seconds:g}")
        return self


def from_env(env: Mapping[str, str] | None = None,
             networks: tuple[str, ...] | None = None) -> list[NetworkSettings]:
    """One NetworkSettings per network (`networks`: the --network flags, else the
    variable); SettingsError names a bad value."""
    environ = os.environ if env is None else env
    s = FinalitySettings.from_env(environ, {"networks": networks} if networks else None)
    default_url = s.eth_rpc_url or AnvilSettings.from_env(environ).rpc_url
    result = []
    for network in s.networks:
        depth = (environ.get(f"PAYSTREAM_FINALITY_CONFIRMATIONS_{network}") or "").strip()
        confirmations = _blocks(f"PAYSTREAM_FINALITY_CONFIRMATIONS_{network}", depth)
        result.append(NetworkSettings(
            network=network,
            rpc_url=environ.get(f"ETH_RPC_URL_{network}") or default_url,
            confirmations=confirmations, tick_seconds=s.tick_seconds,
            rpc_timeout=s.rpc_timeout, breaker=s.breaker, batch_limit=s.batch_limit,
            reorg_grace_blocks=s.reorg_grace_blocks,
            credit_depth=credit_depth(network, confirmations, environ)))
    return result


def _blocks(name: str, text: str) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise SettingsError(f"{name} must be an integer number of blocks, got {text!r}") \
            from None


def credit_depth(network: str, confirmations: int | None,
                 env: Mapping[str, str] | None = None) -> int | None:
    """PAYSTREAM_FINALITY_CREDIT_DEPTH_<network>, validated; None when unset."""
    name = f"PAYSTREAM_FINALITY_CREDIT_DEPTH_{network}"
    depth = _blocks(name, ((os.environ if env is None else env).get(name) or "").strip())
    if depth is None:
        return None
    if depth < 1:
        # 0 would credit a deposit in the head block, which the next block may replace.
        raise SettingsError(f"{name} must be >= 1, got {depth}")
    if confirmations is not None and depth >= confirmations:
        raise SettingsError(f"{name}={depth} must be below the finality depth "
                            f"PAYSTREAM_FINALITY_CONFIRMATIONS_{network}={confirmations}")
    return depth
