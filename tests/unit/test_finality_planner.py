"""The tick plan: due deposits grouped by block; settings from the environment."""

from __future__ import annotations

import pytest

from paystream.finality import settings
from paystream.finality.planner import plan
from paystream.schema.chain import DepositKind, ExpectedDeposit


def deposit(i: int, block: int, kind: DepositKind = DepositKind.TOKEN) -> ExpectedDeposit:
    return ExpectedDeposit(f"e{i}", "ETH_MAINNET", kind, f"0x{i:064x}", block, None,
                           "0x" + "a1" * 20, 1, token_contract="0x" + "cc" * 20,
                           log_index=i if kind is DepositKind.TOKEN else None)


def test_ten_thousand_deposits_in_ten_blocks_make_ten_groups() -> None:
    deps = [deposit(i, 100 + i % 10) for i in range(10_000)]
    tick = plan(deps, finalized=109)
    assert tick.blocks == list(range(100, 110))
    assert sum(len(v) for v in tick.by_block.values()) == 10_000
    assert tick.native_blocks == set() and tick.waiting == 0


def test_deposits_above_finalized_wait_and_natives_need_the_full_block() -> None:
    deps = [deposit(1, 100), deposit(2, 101, DepositKind.EXTERNAL), deposit(3, 102)]
    tick = plan(deps, finalized=101)
    assert tick.blocks == [100, 101] and tick.waiting == 1
    assert tick.native_blocks == {101}


def test_settings_per_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_FINALITY_NETWORKS", "ETH_MAINNET, MATIC_MAINNET")
    monkeypatch.setenv("ETH_RPC_URL", "http://127.0.0.1:9999")
    monkeypatch.setenv("ETH_RPC_URL_MATIC_MAINNET", "http://127.0.0.1:9998")
    monkeypatch.setenv("PAYSTREAM_FINALITY_CONFIRMATIONS_MATIC_MAINNET", "128")
    monkeypatch.setenv("PAYSTREAM_FINALITY_BREAKER", "3/20/5")
    eth, matic = settings.from_env()
    assert (eth.rpc_url, eth.confirmations) == ("http://127.0.0.1:9999", None)
    assert (matic.rpc_url, matic.confirmations) == ("http://127.0.0.1:9998", 128)
    assert (eth.breaker.failures, eth.breaker.window, eth.breaker.cooldown) == (3, 20, 5)
    monkeypatch.setenv("PAYSTREAM_FINALITY_BREAKER", "3-20")
    with pytest.raises(ValueError):
        settings.from_env()
