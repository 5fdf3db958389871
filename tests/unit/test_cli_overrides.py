"""A command-line flag reaches the settings as an explicit override: the process
environment is left as it was, and a bad value is the one settings error (exit 2)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from paystream import cli

KAFKA = ("PAYSTREAM_KAFKA_BROKERS", "PAYSTREAM_KAFKA_BOOTSTRAP", "PAYSTREAM_KAFKA_PORT",
         "PAYSTREAM_CONTROLLER_PORT", "PAYSTREAM_KAFKA_PORT_STEP", "PAYSTREAM_KAFKA_HEAP")


def test_stack_up_brokers_is_an_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    from paystream.stack import stack

    monkeypatch.setenv("PAYSTREAM_STATE_DIR", str(tmp_path))
    for name in KAFKA:
        monkeypatch.delenv(name, raising=False)
    seen: dict[str, Any] = {}
    monkeypatch.setattr(stack, "up", lambda s, **_: seen.setdefault("s", s) and 0)
    assert cli.main(["stack", "up", "--brokers", "3"]) == 0
    s = seen["s"]
    assert (s.brokers, s.kafka_heap) == (3, "384m")
    assert s.kafka_bootstrap == "127.0.0.1:9092,127.0.0.1:9102,127.0.0.1:9112"
    assert "PAYSTREAM_KAFKA_BROKERS" not in os.environ


def test_a_bad_brokers_flag_is_a_settings_error(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PAYSTREAM_STATE_DIR", str(tmp_path))
    for name in KAFKA:
        monkeypatch.delenv(name, raising=False)
    assert cli.main(["stack", "up", "--brokers", "2"]) == 2
    assert "PAYSTREAM_KAFKA_BROKERS (or --brokers) must be one of 1, 3, 5, got 2" in (
        capsys.readouterr().err)


def test_consume_finality_network_is_an_override(monkeypatch: pytest.MonkeyPatch) -> None:
    from paystream.consumers import metrics
    from paystream.finality import service

    monkeypatch.setenv("PAYSTREAM_FINALITY_NETWORKS", "ETH_MAINNET")
    seen: dict[str, Any] = {}
    monkeypatch.setattr(service, "run", lambda networks: seen.setdefault("n", networks) and 0)
    monkeypatch.setattr(metrics, "serve", lambda port: None)
    monkeypatch.setattr("paystream.logs.configure_logging", lambda *a, **k: None)
    assert cli.main(["consume", "finality", "--network", "POLYGON",
                     "--network", "BASE"]) == 0
    assert [n.network for n in seen["n"]] == ["POLYGON", "BASE"]
    assert os.environ["PAYSTREAM_FINALITY_NETWORKS"] == "ETH_MAINNET"
