"""The chain scanner (docs/finality.md#the-chain-scanner) on the REAL stack: a real anvil
(native transfers and an ERC-20 deployed there), a real `paystream consume scanner`, the
ingest, ledger and finality watcher of tests/support/chain/pipeline.py. Deposits no
webhook reported are found and credited once; a webhook before or after the scan is one
event; two scanners credit once; a reorg under the cursor is rescanned; `paystream chain
scan` rescans a range idempotently. The anvil, its token and the pipeline are
tests/integration/conftest.py's fixtures (shared with test_chain_reconcile.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal

import pytest

from paystream.finality.scanner.store import ScannerBusyError, ScanStore
from paystream.ops import users as admin
from paystream.schema.db import connect, database_url
from tests.support.chain.deposits import activities
from tests.support.chain.node import Chain, Token
from tests.support.chain.pipeline import Pipeline, wait_for
from tests.support.chain.scanning import (
    credited_once,
    credits,
    cursor,
    dead_letters,
    deposit_pair,
    paystream,
    providers,
    scanned_up_to,
    start_scanner,
)


def test_deposits_no_webhook_reported_are_found_and_credited_once(
        pipe: Pipeline, chain: Chain, token: Token) -> None:
    user, address = pipe.new_user()
    _, expected, block = deposit_pair(pipe, chain, token, address)
    # Before finality the scanner records nothing: it reads finalized blocks only.
    assert providers(pipe, user) == {}
    chain.finalize(block)
    credited_once(pipe, user, expected)
    assert set(providers(pipe, user).values()) == {"scanner"}
    assert len(providers(pipe, user)) == 2


def test_a_webhook_after_the_scan_is_a_duplicate(pipe: Pipeline, chain: Chain,
                                                 token: Token) -> None:
    user, address = pipe.new_user()
    txs, expected, block = deposit_pair(pipe, chain, token, address)
    chain.finalize(block)
    wait_for("the scanner's deposits", lambda: len(providers(pipe, user)) == 2)
    answer = pipe.post(_activities(pipe, chain, token, txs, address))
    assert {e["outcome"] for e in answer["events"]} == {"duplicate"}, answer
    credited_once(pipe, user, expected)
    assert set(providers(pipe, user).values()) == {"scanner"}


def test_a_webhook_placing_a_scanned_transfer_in_another_block_is_a_reorg_notice(
        pipe: Pipeline, chain: Chain) -> None:
    user, address = pipe.new_user()
    tx = chain.send_native(address, 10**17)
    block = int(chain.receipt(tx)["blockNumber"], 16)
    chain.finalize(block)
    wait_for("the scanner's deposit", lambda: len(providers(pipe, user)) == 1)
    moved = [dict(a, blockNum=hex(block + 1)) for a in activities(chain, [tx], {address})]
    answer = pipe.post(moved)  # 200, not a conflict: the provider's word on a reorg
    assert answer["events"] == [], answer
    notices = pipe.query("SELECT reason FROM ingest_notices WHERE event_id = %s AND"
                         " kind = 'reorg'", (next(iter(providers(pipe, user))),))
    assert notices == [("block_changed",)]
    assert set(providers(pipe, user).values()) == {"scanner"}


def test_a_webhook_before_the_scan_stays_the_one_event(pipe: Pipeline, chain: Chain,
                                                       token: Token) -> None:
    user, address = pipe.new_user()
    txs, expected, block = deposit_pair(pipe, chain, token, address)
    pipe.deliver(txs, address, [token])
    pipe.wait_states(user, lambda s: len(s) == 2)
    chain.finalize(block)
    scanned_up_to(pipe, block)
    credited_once(pipe, user, expected)
    assert set(providers(pipe, user).values()) == {"alchemy"}


def test_two_scanners_of_one_network_credit_once(pipe: Pipeline, chain: Chain,
                                                 token: Token) -> None:
    start_scanner(pipe, chain, "scanner-2")
    try:
        log = pipe.log_dir / "scanner-2.log"
        wait_for("the second scanner", lambda: log.exists()
                 and "scanner_started" in log.read_text(), timeout=30)
        user, address = pipe.new_user()
        _, expected, block = deposit_pair(pipe, chain, token, address)
        chain.finalize(block)
        credited_once(pipe, user, expected)
    finally:
        second = pipe.processes.pop("scanner-2")
        second.terminate()
        second.wait(timeout=20)
    assert second.returncode == 0


def test_a_scanner_killed_mid_pass_neither_skips_nor_repeats_a_deposit(
        pipe: Pipeline, chain: Chain, token: Token) -> None:
    user, address = pipe.new_user()
    chain.set_automine(False)  # the twelve in one block, not final before the hold below
    try:
        txs = [token.transfer(address, 1_000_000 + i) for i in range(12)]
        chain.mine(1)
    finally:
        chain.set_automine(True)
    logs = [log for tx in txs for log in chain.receipt(tx)["logs"]]
    assert len(logs) == 12
    # Another transaction holds the 7th deposit's event id, uncommitted: the scanner's
    # pass writes the first six, then waits on that row. Killed there, its pass is lost.
    held = logs[6]
    event_id = (f"{pipe.network}:{held['transactionHash']}:log:"
                f"{int(held['logIndex'], 16)}")
    blocker = connect(database_url("owner"))
    try:
        with blocker.cursor() as cur:
            cur.execute("INSERT INTO payment_events (event_id, provider, event_type, user_id,"
                        " asset, amount, content_hash, trace_id, payload) VALUES (%s, 'test',"
                        " 'deposit', %s, 'X', 1, 'x', 'x', '{}')", (event_id, user))
        chain.finalize(int(held["blockNumber"], 16))

        def scanner_waiting() -> bool:
            return bool(pipe.query(
                "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (blocker.get_backend_pid(),)))
        wait_for("the scanner waiting on the held deposit", scanner_waiting, timeout=30)
        assert len(providers(pipe, user)) == 0  # nothing of the pass is visible
        pipe.processes["scanner"].kill()
        pipe.processes["scanner"].wait(timeout=10)
    finally:
        blocker.rollback()
        blocker.close()
    start_scanner(pipe, chain)
    # Counted from the chain: every Transfer log to the address, credited once each.
    _credited_once_each(pipe, user, len(logs))
    expected = sum(int(log["data"], 16) for log in logs)
    assert pipe.balances(user) == {f"{pipe.network}:{token.address}": (
        Decimal(expected) / 10**6, 0)}
    assert set(providers(pipe, user).values()) == {"scanner"}


def _credited_once_each(pipe: Pipeline, user: str, count: int) -> None:
    pipe.wait_states(user, lambda s: len(s) == count and set(s.values()) == {"final"})
    wait_for("every credit", lambda: credits(pipe, user) == count)
    assert dead_letters(pipe, list(pipe.states(user))) == 0


def _beside_the_pipelines_scanner(step: Callable[[], None], timeout: float = 30) -> None:
    """`step`, tried again while the pipeline's own scanner holds the cursor: it takes
    the same lock for each of its passes (a moment, every tick)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            step()
            return
        except ScannerBusyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_a_pass_finds_the_cursor_locked_by_another_scanner(pipe: Pipeline) -> None:
    holder, other = ScanStore(), ScanStore()

    def refused_while_held() -> None:
        with holder.pass_for(pipe.network) as scan:
            assert scan.cursor() is not None  # locked until this transaction ends
            with pytest.raises(ScannerBusyError), other.pass_for(pipe.network) as second:
                second.cursor()

    def free_again() -> None:
        with other.pass_for(pipe.network) as second:
            assert second.cursor() is not None

    try:
        _beside_the_pipelines_scanner(refused_while_held)
        _beside_the_pipelines_scanner(free_again)
    finally:
        holder.close()
        other.close()


def test_a_reorg_under_the_cursor_is_rescanned(pipe: Pipeline, chain: Chain) -> None:
    user, address = pipe.new_user()
    chain.mine(4)
    head = chain.head()
    scanned_up_to(pipe, chain.finalized())
    before = cursor(pipe)
    assert before is not None and before.number < head
    # Replace the blocks from below the cursor to the head; a transfer to our address
    # lands in the first new block, under the cursor: read again or never seen.
    depth = head - before.number + 2
    chain.reorg(depth, [({"from": chain.funder, "to": address, "value": hex(7 * 10**17)},
                         0)])
    assert chain.block(before.number)["hash"] != before.hash
    chain.finalize(chain.head())
    credited_once(pipe, user, {f"{pipe.network}:native": Decimal("0.7")})
    after = cursor(pipe)
    assert after is not None and after.hash == chain.block(after.number)["hash"]


def test_chain_scan_rescans_a_range_idempotently(pipe: Pipeline, chain: Chain,
                                                 token: Token) -> None:
    # An address registered after its first payment, once the scanner passed it.
    address = chain.new_address()
    _, expected, block = deposit_pair(pipe, chain, token, address)
    chain.finalize(block)
    scanned_up_to(pipe, block)
    user = "scan-" + address[2:14]
    conn = connect(database_url("owner"))
    try:
        admin.add_user(conn, user)
        admin.add_address(conn, pipe.network, address, user)
    finally:
        conn.close()
    first = _chain_scan(pipe, chain, block - 2, block)
    assert "2 new deposit(s), 0 already recorded" in first, first
    again = _chain_scan(pipe, chain, block - 2)
    assert "0 new deposit(s), 2 already recorded" in again, again
    credited_once(pipe, user, expected)
    assert set(providers(pipe, user).values()) == {"scanner"}


def _chain_scan(pipe: Pipeline, chain: Chain, first: int, last: int | None = None) -> str:
    args = ["chain", "scan", "--network", pipe.network, "--from", str(first)]
    if last is not None:
        args += ["--to", str(last)]
    done = paystream(chain, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _activities(pipe: Pipeline, chain: Chain, token: Token, txs: list[str], address: str
                ) -> list[dict]:
    return activities(chain, txs, {address}, [token])
