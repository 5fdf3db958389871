"""Signed sample deliveries and a real ingest server, for tests and benchmarks.

Not used by the service itself. Payloads follow the providers' documented shapes;
signatures are computed exactly as the providers do, over the bytes that are sent.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from paystream.ingest import alchemy_signature, standard_webhooks
from paystream.launch import free_port, paystream_argv
from paystream.schema.db import connect, database_url
from tests.support.ids import unique

ALCHEMY_KEY = "whsec_paystream-test-alchemy-signing-key-0001"
PAYMENTS_SECRET_BYTES = b"paystream-test-payments-secret-32+bytes!"
PAYMENTS_SECRET = "whsec_" + base64.b64encode(PAYMENTS_SECRET_BYTES).decode()
USDC = "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"


def ingest_env(**overrides: str) -> dict[str, str]:
    """Environment for an ingest process with the test secrets."""
    env = {"ALCHEMY_SIGNING_KEY": ALCHEMY_KEY, "PAYMENTS_WEBHOOK_SECRET": PAYMENTS_SECRET,
           "PAYMENTS_DEFAULT_ASSET": "USD"}
    env.update(overrides)
    return env


def random_hash() -> str:
    return "0x" + uuid.uuid4().hex + uuid.uuid4().hex


def random_address() -> str:
    return "0x" + (uuid.uuid4().hex + uuid.uuid4().hex)[:40]


def create_users(user_ids: Iterable[str]) -> None:
    """Create these users in the stack's database (those that exist stay as they are):
    the ingest refuses a gateway event of a user that does not exist (422)."""
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            cur.execute("INSERT INTO users (user_id) SELECT unnest(%s::text[])"
                        " ON CONFLICT DO NOTHING", (list(user_ids),))
    finally:
        conn.close()


def known_user(prefix: str = "user") -> str:
    """A new user id no other test uses, created in the stack's database."""
    user = unique(prefix)
    create_users([user])
    return user


def payment_body(event_id: str, user_id: str, amount: str = "10.5",
                 event_type: str = "deposit", **extra: Any) -> bytes:
    return json.dumps({"event_id": event_id, "event_type": event_type, "user_id": user_id,
                       "amount": amount, **extra}).encode()


def payment_headers(body: bytes, *, msg_id: str | None = None, timestamp: int | None = None,
                    secret: bytes = PAYMENTS_SECRET_BYTES) -> dict[str, str]:
    msg_id = msg_id or "msg_" + uuid.uuid4().hex
    timestamp = int(time.time()) if timestamp is None else timestamp
    return {"content-type": "application/json", "webhook-id": msg_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": standard_webhooks.sign(msg_id, timestamp, body, secret)}


def erc20_activity(to: str, raw_value: int, *, contract: str = USDC, decimals: Any = 6,
                   tx_hash: str | None = None, log_index: int = 0, block: int = 0x1234567,
                   block_hash: str | None = None, sender: str | None = None,
                   removed: bool = False) -> dict[str, Any]:
    tx_hash = tx_hash or random_hash()
    return {
        "fromAddress": sender or random_address(), "toAddress": to,
        "blockNum": hex(block), "hash": tx_hash,
        "value": raw_value / 10 ** int(str(decimals), 0) if decimals is not None else None,
        "asset": "USDC", "category": "erc20",
        "rawContract": {"rawValue": "0x" + format(raw_value, "064x"), "address": contract,
                        "decimals": decimals},
        "log": {"address": contract, "topics": [], "data": "0x" + format(raw_value, "064x"),
                "blockNumber": hex(block), "transactionHash": tx_hash,
                "transactionIndex": "0x1", "blockHash": block_hash or random_hash(),
                "logIndex": hex(log_index), "removed": removed},
    }


def eth_activity(to: str, wei: int, *, category: str = "external", tx_hash: str | None = None,
                 trace: str | None = None, block: int = 0x1234567,
                 sender: str | None = None) -> dict[str, Any]:
    activity = {
        "fromAddress": sender or random_address(), "toAddress": to, "blockNum": hex(block),
        "hash": tx_hash or random_hash(), "value": wei / 10**18, "asset": "ETH",
        "category": category,
        "rawContract": {"rawValue": hex(wei), "address": None, "decimals": 18},
    }
    if trace is not None:
        activity["typeTraceAddress"] = trace
    return activity


def nft_activity(to: str) -> dict[str, Any]:
    tx_hash = random_hash()
    return {
        "fromAddress": random_address(), "toAddress": to, "blockNum": "0x1234567",
        "hash": tx_hash, "erc721TokenId": "0x1", "category": "erc721", "asset": "NFT",
        "rawContract": {"rawValue": "0x", "address": random_address(), "decimals": None},
        "log": {"logIndex": "0x3", "blockHash": random_hash(), "removed": False,
                "transactionHash": tx_hash},
    }


def alchemy_body(activities: list[dict[str, Any]], *, network: str = "ETH_MAINNET",
                 delivery_id: str | None = None, error: str | None = None) -> bytes:
    event: dict[str, Any] = {"network": network, "activity": activities}
    if error is not None:
        event = {"error": error}
    return json.dumps({
        "webhookId": "wh_paystreamtest", "id": delivery_id or "whevt_" + uuid.uuid4().hex,
        "createdAt": "2024-09-25T07:51:07.945953790Z", "type": "ADDRESS_ACTIVITY",
        "event": event,
    }).encode()


def alchemy_headers(body: bytes, key: str = ALCHEMY_KEY) -> dict[str, str]:
    return {"content-type": "application/json",
            "x-alchemy-signature": alchemy_signature.sign(body, key.encode())}


@dataclass(frozen=True)
class RunningServer:
    url: str  # the public listener: webhooks and /healthz
    process: subprocess.Popen[bytes]
    log_path: Path
    admin_url: str = ""  # metrics, readiness, /docs, /openapi.json (the ingest only)
    port: int = 0


@contextmanager
def ingest_server(env: Mapping[str, str] | None = None, *, workers: int = 1,
                  log_path: Path | None = None, app: str | None = None,
                  ready_path: str = "/healthz") -> Iterator[RunningServer]:
    """A real server in a child process on free loopback ports: the ingest as `paystream
    ingest` runs it (public and admin listener, the edge protocol), or another ASGI app
    factory (`app`, e.g. the benchmark's bare endpoint) under plain uvicorn."""
    port, admin_port = free_port(), free_port()
    log_path = log_path or Path(f"/tmp/paystream-ingest-{port}.log")
    full_env = {**os.environ, **ingest_env(),
                "PAYSTREAM_INGEST_ADMIN_PORT": str(admin_port), **(env or {})}
    if app is None:
        cmd = paystream_argv("ingest", "--host", "127.0.0.1", "--port", str(port),
                             "--workers", str(workers))
    else:
        cmd = [sys.executable, "-m", "uvicorn", app, "--factory", "--host", "127.0.0.1",
               "--port", str(port), "--workers", str(workers), "--no-access-log",
               "--log-level", "warning"]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(cmd, env=full_env, stdout=log_file,
                                   stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"ingest server exited with {process.returncode}: "
                                   + log_path.read_text()[-2000:])
            try:
                if httpx.get(url + ready_path, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("ingest server did not start: "
                                   + log_path.read_text()[-2000:])
            time.sleep(0.1)
        admin_url = f"http://127.0.0.1:{full_env['PAYSTREAM_INGEST_ADMIN_PORT']}"
        yield RunningServer(url, process, log_path, admin_url if app is None else "", port)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
