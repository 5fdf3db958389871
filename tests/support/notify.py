"""Helpers of the notifier's tests: endpoints added through the CLI, intents on a topic
as Debezium writes them, the sender as a process of its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path

from paystream.launch import paystream_argv
from paystream.notify.intents import (
    Intent,
    IntentType,
    new_intent,
    now_text,
    outbox_batches,
)
from paystream.notify.seal import Sealer, process_sealer
from tests.support.consumers import ConsumerProcess

Message = tuple[bytes, bytes, list[tuple[str, bytes]]]

# Short schedules and timeouts, so a test sees retries, leases and timeouts in seconds.
FAST = {"PAYSTREAM_NOTIFY_RETRY_DELAYS_S": "0.3,0.3,0.3,0.3,0.3,0.3",
        "PAYSTREAM_NOTIFY_JITTER": "0", "PAYSTREAM_NOTIFY_TIMEOUT_S": "2",
        "PAYSTREAM_NOTIFY_LEASE_S": "4", "PAYSTREAM_NOTIFY_POLL_S": "0.05",
        "PAYSTREAM_NOTIFY_PER_ENDPOINT": "4"}


def add_endpoint(url: str, user: str, events: str | None = None) -> tuple[str, str]:
    """`paystream users add` (an endpoint names an existing user), then `paystream endpoints
    add`; returns (endpoint id, whsec_ secret) from its output."""
    subprocess.run(paystream_argv("users", "add", user), capture_output=True, timeout=60,
                   check=True)
    args = ["endpoints", "add", "--url", url, "--user", user]
    if events:
        args += ["--events", events]
    out = subprocess.run(paystream_argv(*args), capture_output=True, text=True, timeout=60,
                         check=True).stdout
    found = re.search(r"endpoint (ep_[0-9a-f]{24}) added", out)
    secret = re.search(r"secret: (whsec_\S+)", out)
    assert found and secret, out
    return found.group(1), secret.group(1)


def endpoints_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(paystream_argv("endpoints", *args), capture_output=True, text=True,
                          timeout=60)


def intents(prefix: str, user: str, count: int,
            kinds: Sequence[IntentType] = (IntentType.DEPOSIT_CREDITED,)) -> list[Intent]:
    return [new_intent(kinds[i % len(kinds)], f"{prefix}-{i}", user, event_type="deposit",
                       asset="USD", amount=Decimal(i + 1) / 100, created_at=now_text())
            for i in range(count)]


def messages(items: Sequence[Intent], sealer: Sealer | None = None) -> list[Message]:
    """The records Debezium's outbox router writes for these intents, one intent each
    (as an operator's shortfall resolution is written; notify.intents.outbox_batches
    makes the value), sealed with the stack's key unless another `sealer` is given."""
    out: list[Message] = []
    for i in items:
        [row] = outbox_batches([(i, f"trace-{i.id}")], i.user_id, sealer or process_sealer())
        out.append((i.user_id.encode(), json.dumps(row["payload"]).encode(),
                    [("event_type", row["type"].encode()), ("event_id", row["event_id"].encode()),
                     ("trace_id", row["trace_id"].encode())]))
    return out


def start_sender(log_dir: Path, env: dict[str, str]) -> ConsumerProcess:
    """`paystream notify deliver` with `env` over the test's environment."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"sender-{time.monotonic_ns()}.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(paystream_argv("notify", "deliver"), stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, **env})
    return ConsumerProcess(proc, log_path)
