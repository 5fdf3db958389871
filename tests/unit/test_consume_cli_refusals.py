"""`paystream consume` refuses, before anything starts, a configuration that would let
offsets move before the DB commit: exit 2 and the reason on stderr."""

from __future__ import annotations

import os
import subprocess

import pytest

from paystream.launch import paystream_argv


def _consume(*extra: str, tmp_path) -> subprocess.CompletedProcess[str]:
    # PLAINTEXT: no Kafka password to read, so nothing but the checked setting can fail
    # before the refusal (no stack runs for this state dir).
    env = {**os.environ, "PAYSTREAM_STATE_DIR": str(tmp_path),
           "PAYSTREAM_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}
    return subprocess.run(paystream_argv("consume", "ledger", *extra), env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("setting", ["enable.auto.commit=true", "enable.auto.commit=1",
                                     "enable.auto.offset.store=True"])
def test_an_automatic_offset_setting_is_refused_with_exit_2(setting: str, tmp_path) -> None:
    done = _consume("--kafka-config", setting, tmp_path=tmp_path)
    key = setting.partition("=")[0]
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"{key} must be false" in done.stderr
    assert "consumer_started" not in done.stdout + done.stderr


def test_a_malformed_override_is_refused_with_exit_2(tmp_path) -> None:
    done = _consume("--kafka-config", "enable.auto.commit", tmp_path=tmp_path)
    assert done.returncode == 2
    assert "KEY=VALUE" in done.stderr
