"""The merchant API for tests: a real `paystream api` in a child process on free loopback
ports, and API keys made as `paystream apikeys create` makes them."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from paystream.api import keys
from paystream.launch import free_port, paystream_argv
from paystream.schema.db import connect, database_url
from paystream.schema.merchants import DEFAULT_MERCHANT


@dataclass
class ApiServer:
    url: str
    admin_url: str
    process: subprocess.Popen[bytes]
    log_path: Path


# A rate limit no test reaches (the rate-limit test sets its own).
UNLIMITED = {"PAYSTREAM_API_RATE_PER_SECOND": "1000", "PAYSTREAM_API_RATE_BURST": "1000"}


@contextmanager
def api_server(env: Mapping[str, str] | None = None, *, workers: int = 1
               ) -> Iterator[ApiServer]:
    port, admin_port = free_port(), free_port()
    log_path = Path(f"/tmp/paystream-api-{port}.log")
    full_env = {**os.environ, "PAYSTREAM_API_ADMIN_PORT": str(admin_port), **(env or {})}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            paystream_argv("api", "--host", "127.0.0.1", "--port", str(port),
                           "--workers", str(workers)),
            env=full_env, stdout=log, stderr=subprocess.STDOUT)
    url, admin_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"api exited with {process.returncode}: "
                                   + log_path.read_text()[-2000:])
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("api did not start: " + log_path.read_text()[-2000:])
            time.sleep(0.1)
        yield ApiServer(url, admin_url, process, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def new_key(scopes: str = "read,write", name: str = "test",
            merchant_id: str | None = DEFAULT_MERCHANT) -> tuple[str, str]:
    """(key id, key) of a fresh live key of `merchant_id` (None: an operator's), made as
    `paystream apikeys create` does."""
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            made, key = keys.create(cur, name, keys.parse_scopes(scopes), merchant_id)
    finally:
        conn.close()
    return made.key_id, key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
