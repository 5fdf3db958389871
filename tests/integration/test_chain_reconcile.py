"""The chain scanner's backfill and lag, and the books checked against the chain, on the
REAL stack (tests/integration/conftest.py's anvil, ERC-20 and pipeline with a scanner;
no webhook posted):

- an address registered after its first payment, with `addresses add --scan-from`, is
  credited once by the scanner's backfill; a second backfill credits nothing more;
- `paystream health` and its exporter show `chain_scan_lag_blocks` per network;
- `paystream reconcile --chain` is clean after deposits; an address drained on chain
  (anvil_setBalance) is a shortfall and a balance never credited a surplus, both named,
  exit 1; `--loop` publishes the shortfall as a metric.

The reconcile tests run last in this module: they leave the network unclean on purpose.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal

import httpx

from paystream.launch import free_port, paystream_argv
from paystream.ops import users as admin
from paystream.schema.db import connect, database_url
from tests.support.chain.node import Chain, Token
from tests.support.chain.pipeline import Pipeline, wait_for
from tests.support.chain.scanning import (
    credited_once,
    credits,
    deposit_pair,
    paystream,
    providers,
    scanned_up_to,
    scanner_env,
)


def _new_user() -> str:
    user = "scan-" + uuid.uuid4().hex[:12]
    conn = connect(database_url("owner"))
    try:
        admin.add_user(conn, user)
    finally:
        conn.close()
    return user


def _paid_before_registration(pipe: Pipeline, chain: Chain, token: Token
                              ) -> tuple[str, str, dict[str, Decimal], int]:
    """An address paid (native + token), the scanner past those blocks, and only then a
    user for it (the address not yet assigned)."""
    address = chain.new_address()
    _, expected, block = deposit_pair(pipe, chain, token, address)
    chain.finalize(block)
    scanned_up_to(pipe, block)
    return _new_user(), address, expected, block


def _backfills_done(pipe: Pipeline, address: str) -> bool:
    rows = pipe.query("SELECT done_at IS NOT NULL FROM chain_scan_backfills"
                      " WHERE network = %s AND address = %s", (pipe.network, address))
    return bool(rows) and all(done for (done,) in rows)


def test_an_address_paid_before_it_was_registered_is_backfilled_once(
        pipe: Pipeline, chain: Chain, token: Token) -> None:
    user, address, expected, block = _paid_before_registration(pipe, chain, token)
    add = ["addresses", "add", "--network", pipe.network, "--address", address,
           "--user", user, "--scan-from", str(max(0, block - 3))]
    done = paystream(chain, *add)
    assert done.returncode == 0, done.stderr
    assert f"added; scan from block {add[-1]} requested" in done.stdout
    credited_once(pipe, user, expected)
    assert set(providers(pipe, user).values()) == {"scanner"}
    wait_for("the backfill done", lambda: _backfills_done(pipe, address))
    # A second request for the whole past: read again, every transfer a duplicate.
    again = paystream(chain, *add[:-1], "0")
    assert again.returncode == 0 and "already assigned; scan from block" in again.stdout
    wait_for("the second backfill done", lambda: _backfills_done(pipe, address))
    assert len(pipe.query("SELECT 1 FROM chain_scan_backfills WHERE address = %s",
                          (address,))) == 2
    credited_once(pipe, user, expected)
    assert credits(pipe, user) == 2


def _metric(port: int, name: str, network: str) -> float | None:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    found = re.search(rf'^{name}{{network="{network}"}} (\S+)$', text, re.M)
    return None if found is None else float(found.group(1))


@contextmanager
def _serving(chain: Chain, args: list[str], env: dict[str, str]
             ) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(paystream_argv(*args),
                            env={**os.environ, **scanner_env(chain), **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_the_scanners_lag_shows_in_health_and_as_a_metric(pipe: Pipeline,
                                                           chain: Chain) -> None:
    # A second network on the same node whose cursor sits at block 0: far behind.
    behind = "ANVIL_LAG_" + uuid.uuid4().hex[:8].upper()
    scanned_up_to(pipe, chain.finalized())
    pipe.query("INSERT INTO chain_scan_cursors (network, block_number, block_hash)"
               " VALUES (%s, 0, %s) RETURNING network", (behind, chain.block(0)["hash"]))
    env = {"PAYSTREAM_FINALITY_NETWORKS": f"{pipe.network},{behind}",
           "PAYSTREAM_HEALTH_SCAN_LAG_WARN": "3", "PAYSTREAM_HEALTH_SCAN_LAG_UNHEALTHY": "1000000"}
    try:
        done = paystream(chain, "health", "--check", "chain_scan", "--json", env=env)
        assert done.returncode == 0, done.stderr  # a warning is not unhealthy
        rows = {row["what"]: row for row in json.loads(done.stdout)}
        lagging = rows[f"chain scanner lag on {behind}"]
        assert lagging["verdict"] == "warn"
        assert lagging["value"].startswith(f"{chain.finalized()} blocks"), lagging
        assert rows[f"chain scanner lag on {pipe.network}"]["verdict"] == "ok", rows
        port = free_port()
        with _serving(chain, ["health", "--serve-metrics", str(port), "--check", "chain_scan"],
                      env):
            lag = wait_for("the lag metric", lambda: _metric(
                port, "paystream_chain_scan_lag_blocks", behind), timeout=30)
        assert lag >= chain.finalized() - 1
    finally:
        pipe.query("DELETE FROM chain_scan_cursors WHERE network = %s RETURNING network",
                   (behind,))


def _reconcile(pipe: Pipeline, chain: Chain) -> subprocess.CompletedProcess[str]:
    return paystream(chain, "reconcile", "--chain", "--network", pipe.network)


def test_reconcile_chain_is_clean_after_deposits(pipe: Pipeline, chain: Chain,
                                                 token: Token) -> None:
    user, address = pipe.new_user()
    _, expected, block = deposit_pair(pipe, chain, token, address)
    chain.finalize(block)
    credited_once(pipe, user, expected)
    done = _reconcile(pipe, chain)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok, the chain holds what the books say" in done.stdout, done.stdout


def test_a_drained_address_is_a_shortfall_and_an_uncredited_balance_a_surplus(
        pipe: Pipeline, chain: Chain, token: Token) -> None:
    drained_user, drained = pipe.new_user()
    _, expected, block = deposit_pair(pipe, chain, token, drained)
    chain.finalize(block)
    credited_once(pipe, drained_user, expected)
    # Paid before it was ours, registered without --scan-from: never credited.
    user, extra, _, _ = _paid_before_registration(pipe, chain, token)
    admin_conn = connect(database_url("owner"))
    try:
        admin.add_address(admin_conn, pipe.network, extra, user)
    finally:
        admin_conn.close()
    chain.rpc("anvil_setBalance", drained, "0x0")  # the native coin gone from custody
    chain.finalize(chain.head() + 1)
    done = _reconcile(pipe, chain)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "1 SHORTFALL(S), 2 SURPLUS(ES)" in lines[0], done.stdout
    short = [line for line in lines if drained in line]
    assert len(short) == 1 and "shortfall" in short[0] and ":native" in short[0], done.stdout
    # Both its native coin and its token: the token read at every address of the network.
    surplus = [line for line in lines if extra in line]
    assert len(surplus) == 2 and all("surplus" in line for line in surplus), done.stdout
    port = free_port()
    with _serving(chain, ["reconcile", "--chain", "--network", pipe.network, "--loop",
                          "--every", "1", "--metrics-port", str(port)], {}):
        shortfalls = wait_for("the shortfall metric", lambda: _metric(
            port, "paystream_chain_reconcile_shortfall", pipe.network), timeout=30)
        assert _metric(port, "paystream_chain_reconcile_surplus", pipe.network) == 2
    assert shortfalls == 1
