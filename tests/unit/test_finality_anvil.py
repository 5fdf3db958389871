"""stack/anvil.py without starting anything: the command line and settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from paystream.stack import anvil
from paystream.stack.settings import StackSettings


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StackSettings:
    monkeypatch.setenv("PAYSTREAM_STATE_DIR", str(tmp_path))
    return StackSettings.from_env()


def test_defaults_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PORT", "CHAIN_ID", "BLOCK_TIME", "SLOTS_IN_EPOCH", "MNEMONIC", "PERSIST"):
        monkeypatch.delenv(f"PAYSTREAM_ANVIL_{name}", raising=False)
    cfg = anvil.AnvilConfig.from_env()
    assert (cfg.port, cfg.chain_id, cfg.block_time, cfg.slots_in_an_epoch) == \
        (8545, 31337, 0.0, 2)
    assert cfg.finality_depth == 4 and cfg.persist
    monkeypatch.setenv("PAYSTREAM_ANVIL_PORT", "9545")
    monkeypatch.setenv("PAYSTREAM_ANVIL_BLOCK_TIME", "2")
    monkeypatch.setenv("PAYSTREAM_ANVIL_PERSIST", "0")
    cfg = anvil.AnvilConfig.from_env()
    assert (cfg.port, cfg.block_time, cfg.persist) == (9545, 2.0, False)
    assert cfg.rpc_url == "http://127.0.0.1:9545"


def test_command_is_loopback_deterministic_and_persistent(stack: StackSettings) -> None:
    cfg = anvil.AnvilConfig(port=8650, block_time=1.5, name="anvil-x")
    cmd = anvil.command(stack, cfg)
    assert cmd[0] == str(anvil.binary(stack))
    pairs = dict(zip(cmd[1::2], cmd[2::2], strict=False))
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "8650"
    assert pairs["--chain-id"] == "31337" and pairs["--mnemonic"] == anvil.DEFAULT_MNEMONIC
    assert pairs["--slots-in-an-epoch"] == "2" and pairs["--block-time"] == "1.5"
    assert cmd[cmd.index("--state") + 1] == str(stack.state_dir / "anvil" /
                                                "anvil-x-state.json")
    assert anvil.pid_file(stack, cfg).name == "anvil-x.pid"
    assert anvil.log_file(stack, cfg).name == "anvil-x.log"
    fresh = anvil.command(stack, anvil.AnvilConfig(persist=False, gas_limit=10**9))
    assert "--state" not in fresh and "--block-time" not in fresh
    assert fresh[fresh.index("--gas-limit") + 1] == str(10**9)


def test_not_installed_is_reported_not_guessed(stack: StackSettings) -> None:
    assert anvil.installed_version(stack) is None
    assert anvil.version(stack) == "-"
    assert not anvil.healthy(stack, anvil.AnvilConfig(port=1))
