"""The chain scanner (docs/finality.md#the-chain-scanner) on the REAL stack: a real anvil
(native transfers and an ERC-20 deployed there), a real `paystream consume scanner`, the
ingest, ledger and finality watcher of tests/support/chain/pipeline.py. Deposits no
webhook reported are found and credited once; a webhook before or after the scan is one
event; two scanners credit once; a reorg under the cursor is rescanned; `paystream chain
scan` rescans a range idempotently.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from decimal import Decimal

import pytest

from paystream.finality.evidence import BlockRef
from paystream.finality.scan_store import ScannerBusyError, ScanStore
from paystream.launch import paystream_argv
from paystream.ops import users as admin
from paystream.schema.db import connect, database_url
from tests.support.chain.deposits import activities
from tests.support.chain.node import AnvilUnavailableError, Chain, Token, running_anvil
from tests.support.chain.pipeline import Pipeline, wait_for

PORT = 18653
REWIND = 8


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    try:
        with running_anvil(PORT, name="anvil-scanner-test") as node:
            yield node
    except AnvilUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def token(chain: Chain) -> Token:
    return chain.deploy_token("PUSD", decimals=6)


def _scanner_env(chain: Chain) -> dict[str, str]:
    return {"ETH_RPC_URL": chain.url, "PAYSTREAM_SCANNER_POLL_SECONDS": "0.2",
            "PAYSTREAM_SCANNER_RANGE_BLOCKS": "16",
            "PAYSTREAM_SCANNER_REWIND_BLOCKS": str(REWIND),
            "PAYSTREAM_FINALITY_TICK_SECONDS": "0.5", "PAYSTREAM_FINALITY_RPC_TIMEOUT": "1"}


@pytest.fixture(scope="module")
def pipe(chain: Chain, token: Token) -> Iterator[Pipeline]:
    with Pipeline(chain) as p:
        p.start("scanner", ["consume", "scanner", "--network", p.network,
                            "--metrics-port", "0"], _scanner_env(chain))
        wait_for("the scanner's cursor", lambda: _cursor(p) is not None, timeout=30)
        yield p


def _cursor(pipe: Pipeline) -> BlockRef | None:
    rows = pipe.query("SELECT block_number, block_hash FROM chain_scan_cursors"
                      " WHERE network = %s", (pipe.network,))
    return BlockRef(int(rows[0][0]), rows[0][1]) if rows else None


def _scanned_up_to(pipe: Pipeline, block: int) -> None:
    def probe() -> bool:
        pipe.check_alive()
        cursor = _cursor(pipe)
        return cursor is not None and cursor.number >= block
    wait_for(f"the scanner past block {block}", probe, timeout=30)


def _providers(pipe: Pipeline, user: str) -> dict[str, str]:
    return dict(pipe.query("SELECT event_id, provider FROM payment_events WHERE user_id = %s",
                           (user,)))


def _credits(pipe: Pipeline, user: str) -> int:
    return int(pipe.query("SELECT count(*) FROM user_entries WHERE book = 'available'"
                          " AND user_id = %s", (user,))[0][0])


def _dead_letters(pipe: Pipeline, event_ids: list[str]) -> int:
    return int(pipe.query("SELECT count(*) FROM dead_letter_queue WHERE event_id = ANY(%s)",
                          (event_ids,))[0][0])


def _credited_once(pipe: Pipeline, user: str, expected: dict[str, Decimal]) -> None:
    pipe.wait_states(user, lambda s: len(s) == len(expected) and set(s.values()) == {"final"})
    wait_for("credited balances", lambda: pipe.balances(user) == {
        asset: (amount, 0) for asset, amount in expected.items()})
    assert _credits(pipe, user) == len(expected)
    assert _dead_letters(pipe, list(pipe.states(user))) == 0


def _deposit_pair(pipe: Pipeline, chain: Chain, token: Token, address: str
                  ) -> tuple[list[str], dict[str, Decimal], int]:
    wei, raw = 10**18 + 3, 4_500_000
    txs = [chain.send_native(address, wei), token.transfer(address, raw)]
    block = max(int(chain.receipt(tx)["blockNumber"], 16) for tx in txs)
    return txs, {f"{pipe.network}:native": Decimal(wei) / 10**18,
                 f"{pipe.network}:{token.address}": Decimal(raw) / 10**6}, block


def test_deposits_no_webhook_reported_are_found_and_credited_once(
        pipe: Pipeline, chain: Chain, token: Token) -> None:
    user, address = pipe.new_user()
    _, expected, block = _deposit_pair(pipe, chain, token, address)
    # Before finality the scanner records nothing: it reads finalized blocks only.
    assert _providers(pipe, user) == {}
    chain.finalize(block)
    _credited_once(pipe, user, expected)
    assert set(_providers(pipe, user).values()) == {"scanner"}
    assert len(_providers(pipe, user)) == 2


def test_a_webhook_after_the_scan_is_a_duplicate(pipe: Pipeline, chain: Chain,
                                                 token: Token) -> None:
    user, address = pipe.new_user()
    txs, expected, block = _deposit_pair(pipe, chain, token, address)
    chain.finalize(block)
    wait_for("the scanner's deposits", lambda: len(_providers(pipe, user)) == 2)
    answer = pipe.post(_activities(pipe, chain, token, txs, address))
    assert {e["outcome"] for e in answer["events"]} == {"duplicate"}, answer
    _credited_once(pipe, user, expected)
    assert set(_providers(pipe, user).values()) == {"scanner"}


def test_a_webhook_placing_a_scanned_transfer_in_another_block_is_a_reorg_notice(
        pipe: Pipeline, chain: Chain) -> None:
    user, address = pipe.new_user()
    tx = chain.send_native(address, 10**17)
    block = int(chain.receipt(tx)["blockNumber"], 16)
    chain.finalize(block)
    wait_for("the scanner's deposit", lambda: len(_providers(pipe, user)) == 1)
    moved = [dict(a, blockNum=hex(block + 1)) for a in activities(chain, [tx], {address})]
    answer = pipe.post(moved)  # 200, not a conflict: the provider's word on a reorg
    assert answer["events"] == [], answer
    notices = pipe.query("SELECT reason FROM ingest_notices WHERE event_id = %s AND"
                         " kind = 'reorg'", (next(iter(_providers(pipe, user))),))
    assert notices == [("block_changed",)]
    assert set(_providers(pipe, user).values()) == {"scanner"}


def test_a_webhook_before_the_scan_stays_the_one_event(pipe: Pipeline, chain: Chain,
                                                       token: Token) -> None:
    user, address = pipe.new_user()
    txs, expected, block = _deposit_pair(pipe, chain, token, address)
    pipe.deliver(txs, address, [token])
    pipe.wait_states(user, lambda s: len(s) == 2)
    chain.finalize(block)
    _scanned_up_to(pipe, block)
    _credited_once(pipe, user, expected)
    assert set(_providers(pipe, user).values()) == {"alchemy"}


def test_two_scanners_of_one_network_credit_once(pipe: Pipeline, chain: Chain,
                                                 token: Token) -> None:
    pipe.start("scanner-2", ["consume", "scanner", "--network", pipe.network,
                             "--metrics-port", "0"], _scanner_env(chain))
    try:
        log = pipe.log_dir / "scanner-2.log"
        wait_for("the second scanner", lambda: log.exists()
                 and "scanner_started" in log.read_text(), timeout=30)
        user, address = pipe.new_user()
        _, expected, block = _deposit_pair(pipe, chain, token, address)
        chain.finalize(block)
        _credited_once(pipe, user, expected)
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
        assert len(_providers(pipe, user)) == 0  # nothing of the pass is visible
        pipe.processes["scanner"].kill()
        pipe.processes["scanner"].wait(timeout=10)
    finally:
        blocker.rollback()
        blocker.close()
    pipe.start("scanner", ["consume", "scanner", "--network", pipe.network,
                           "--metrics-port", "0"], _scanner_env(chain))
    # Counted from the chain: every Transfer log to the address, credited once each.
    _credited_once_each(pipe, user, len(logs))
    expected = sum(int(log["data"], 16) for log in logs)
    assert pipe.balances(user) == {f"{pipe.network}:{token.address}": (
        Decimal(expected) / 10**6, 0)}
    assert set(_providers(pipe, user).values()) == {"scanner"}


def _credited_once_each(pipe: Pipeline, user: str, count: int) -> None:
    pipe.wait_states(user, lambda s: len(s) == count and set(s.values()) == {"final"})
    wait_for("every credit", lambda: _credits(pipe, user) == count)
    assert _dead_letters(pipe, list(pipe.states(user))) == 0


def test_a_pass_finds_the_cursor_locked_by_another_scanner(pipe: Pipeline) -> None:
    holder, other = ScanStore(), ScanStore()
    try:
        with holder.pass_for(pipe.network) as scan:
            assert scan.cursor() is not None  # locked until this transaction ends
            with pytest.raises(ScannerBusyError), other.pass_for(pipe.network) as second:
                second.cursor()
        with other.pass_for(pipe.network) as second:
            assert second.cursor() is not None  # free again
    finally:
        holder.close()
        other.close()


def test_a_reorg_under_the_cursor_is_rescanned(pipe: Pipeline, chain: Chain) -> None:
    user, address = pipe.new_user()
    chain.mine(4)
    head = chain.head()
    _scanned_up_to(pipe, chain.finalized())
    before = _cursor(pipe)
    assert before is not None and before.number < head
    # Replace the blocks from below the cursor to the head; a transfer to our address
    # lands in the first new block, under the cursor: read again or never seen.
    depth = head - before.number + 2
    chain.reorg(depth, [({"from": chain.funder, "to": address, "value": hex(7 * 10**17)},
                         0)])
    assert chain.block(before.number)["hash"] != before.hash
    chain.finalize(chain.head())
    _credited_once(pipe, user, {f"{pipe.network}:native": Decimal("0.7")})
    after = _cursor(pipe)
    assert after is not None and after.hash == chain.block(after.number)["hash"]


def test_chain_scan_rescans_a_range_idempotently(pipe: Pipeline, chain: Chain,
                                                 token: Token) -> None:
    # An address registered after its first payment, once the scanner passed it.
    address = chain.new_address()
    _, expected, block = _deposit_pair(pipe, chain, token, address)
    chain.finalize(block)
    _scanned_up_to(pipe, block)
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
    _credited_once(pipe, user, expected)
    assert set(_providers(pipe, user).values()) == {"scanner"}


def _chain_scan(pipe: Pipeline, chain: Chain, first: int, last: int | None = None) -> str:
    args = ["chain", "scan", "--network", pipe.network, "--from", str(first)]
    if last is not None:
        args += ["--to", str(last)]
    done = subprocess.run(paystream_argv(*args), capture_output=True, text=True, timeout=60,
                          env={**os.environ, **_scanner_env(chain)})
    assert done.returncode == 0, done.stderr
    return done.stdout


def _activities(pipe: Pipeline, chain: Chain, token: Token, txs: list[str], address: str
                ) -> list[dict]:
    return activities(chain, txs, {address}, [token])
