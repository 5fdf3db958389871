"""Finality against a REAL anvil (docs/finality.md): deposits to a deposit address in native coin
and in an ERC-20 we deploy, Alchemy payloads built from their receipts, and the verdicts
before finality, after it, and across reorgs. No chain is mocked; anvil missing fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal

import pytest
from web3 import Web3

from paystream.chaos import alchemy
from paystream.finality import metrics
from paystream.finality.planner import check, check_one_by_one
from paystream.finality.rpc import ChainRpc
from paystream.finality.verify import ChainOutcome
from paystream.finality.watcher import FinalityWatcher
from paystream.ingest import alchemy as ingest_alchemy
from paystream.ingest import alchemy_signature
from paystream.schema.amounts import from_base_units
from paystream.schema.chain import DepositKind
from tests.support.chain.counting import RpcCounter
from tests.support.chain.deposits import NETWORK, SIGNING_KEY, activities, deliver
from tests.support.chain.memory import MemoryLedger
from tests.support.chain.node import AnvilUnavailableError, Chain, Token, running_anvil

PORT = 18645


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    try:
        with running_anvil(PORT) as node:
            yield node
    except AnvilUnavailableError as exc:
        pytest.fail(str(exc))


def rpc_for(chain: Chain) -> ChainRpc:
    # finalized_ttl=0: tests mine between calls and want the fresh finalized block.
    return ChainRpc(NETWORK, chain.url, timeout=5, finalized_ttl=0)


def deposit_pair(chain: Chain, token: Token, wei: int = 10**18 + 7,
                 raw_tokens: int = 123_456_789):
    """One native and one token deposit to a fresh address; returns (address, deposits)."""
    address = chain.new_address()
    native_tx = chain.send_native(address, wei)
    token_tx = token.transfer(address, raw_tokens)
    deps = deliver(activities(chain, [native_tx, token_tx], {address}, [token]),
                   {address: "user-1"})
    assert len(deps) == 2
    return address, deps


def test_finalized_tag_trails_latest_by_two_epochs(chain: Chain) -> None:
    # anvil 1.7.1: finalized = latest - 2 * slots_in_an_epoch (1 here), safe = latest - 1.
    head = chain.mine(3)
    assert chain.finalized() == head - 2
    assert int(chain.block("safe")["number"], 16) == head - 1
    assert chain.finality_depth == 2


def test_real_transfers_make_alchemy_payloads_ingest_accepts(chain: Chain,
                                                             token: Token) -> None:
    address = chain.new_address()
    wei = 1_234_567_890_123_456_789
    raw_tokens = 42_000_001  # 42.000001 PUSD (6 decimals)
    native_tx = chain.send_native(address, wei)
    token_tx = token.transfer(address, raw_tokens)
    acts = activities(chain, [native_tx, token_tx], {address}, [token])
    external, erc20 = acts

    native_receipt, token_receipt = chain.receipt(native_tx), chain.receipt(token_tx)
    # External: the shape of providers.md; no log, no typeTraceAddress.
    assert external["category"] == "external" and external["asset"] == "ETH"
    assert external["hash"] == native_tx and external["toAddress"] == address
    assert external["blockNum"] == native_receipt["blockNumber"]
    assert int(external["rawContract"]["rawValue"], 16) == wei
    assert external["rawContract"]["decimals"] == 18
    assert "typeTraceAddress" not in external and "log" not in external
    # Token: rawValue is the log's data word; the log is the node's, verbatim.
    token_log = token_receipt["logs"][0]
    assert erc20["category"] == "token" and erc20["asset"] == "PUSD"
    assert erc20["rawContract"]["address"] == token.address
    assert erc20["rawContract"]["decimals"] == 6
    assert int(erc20["rawContract"]["rawValue"], 16) == raw_tokens
    assert len(erc20["rawContract"]["rawValue"]) == 66  # 0x + 32 bytes
    assert erc20["log"]["logIndex"] == token_log["logIndex"]
    assert erc20["log"]["blockHash"] == token_receipt["blockHash"]
    assert erc20["blockNum"] == token_receipt["blockNumber"]
    assert "typeTraceAddress" not in erc20

    # Signed as Alchemy signs: hex HMAC-SHA256 of the raw body.
    body, headers = alchemy.signed(alchemy.payload(acts, network=NETWORK), SIGNING_KEY)
    alchemy_signature.verify(body, headers["X-Alchemy-Signature"], [SIGNING_KEY])
    with pytest.raises(Exception, match="does not match"):
        alchemy_signature.verify(body + b" ", headers["X-Alchemy-Signature"], [SIGNING_KEY])

    # ingest turns them into deposits with exact amounts and the chain identity.
    classified = ingest_alchemy.classify(ingest_alchemy.parse_delivery(json.loads(body)),
                                         {address: "user-7"})
    native_event, token_event = classified.events
    assert native_event.amount == from_base_units(wei, 18) == Decimal("1.234567890123456789")
    assert token_event.amount == Decimal("42.000001")
    assert native_event.chain["tx_hash"] == native_tx
    assert native_event.chain["block_number"] == int(native_receipt["blockNumber"], 16)
    assert token_event.chain["log_index"] == int(token_log["logIndex"], 16)
    assert token_event.chain["block_hash"] == token_receipt["blockHash"]
    assert token_event.chain["token_contract"] == token.address


def test_not_yet_until_finalized_passes_the_block_then_final(chain: Chain,
                                                             token: Token) -> None:
    _, deps = deposit_pair(chain, token)
    native, erc20 = sorted(deps, key=lambda d: d.kind is DepositKind.TOKEN)
    rpc = rpc_for(chain)

    finalized = rpc.finalized_block().number
    assert finalized < erc20.block_number
    verdicts = dict((d.event_id, v) for d, v in check(rpc, deps, finalized))
    assert {v.outcome for v in verdicts.values()} == {ChainOutcome.NOT_YET}

    # One block short of finality: still not final.
    chain.finalize(erc20.block_number - 1)
    finalized = rpc.finalized_block().number
    assert native.block_number <= finalized < erc20.block_number
    verdicts = dict((d.event_id, v) for d, v in check(rpc, deps, finalized))
    assert verdicts[native.event_id].outcome is ChainOutcome.FINAL
    assert verdicts[erc20.event_id].outcome is ChainOutcome.NOT_YET

    chain.finalize(erc20.block_number)
    finalized = rpc.finalized_block().number
    for deposit, verdict in check(rpc, deps, finalized):
        assert verdict.outcome is ChainOutcome.FINAL, verdict
        assert verdict.block is not None and verdict.block.number == deposit.block_number
        assert not verdict.moved
    # The per-deposit baseline agrees.
    assert [v for _, v in check_one_by_one(rpc, deps, finalized)] == \
        [v for _, v in check(rpc, deps, finalized)]


def test_reorg_that_drops_the_transactions_marks_them_reorged(chain: Chain,
                                                              token: Token) -> None:
    start = chain.head()
    _, deps = deposit_pair(chain, token)
    depth = chain.head() - start  # both deposit blocks
    chain.reorg(depth)  # replaced by empty blocks; anvil drops the transactions
    assert chain.head() == start + depth
    for deposit in deps:
        assert chain.receipt(deposit.tx_hash) is None
    rpc = rpc_for(chain)
    # Not final yet: the node might still catch up, so no verdict.
    assert {v.outcome for _, v in check(rpc, deps, rpc.finalized_block().number)} == \
        {ChainOutcome.NOT_YET}
    chain.finalize(max(d.block_number for d in deps))
    for _deposit, verdict in check(rpc, deps, rpc.finalized_block().number):
        assert verdict.outcome is ChainOutcome.REORGED
        assert verdict.reason == "tx_not_in_chain"


def test_snapshot_revert_then_other_blocks_is_a_reorg(chain: Chain, token: Token) -> None:
    snapshot = chain.snapshot()
    _, deps = deposit_pair(chain, token)
    assert chain.revert(snapshot)
    chain.send_native(chain.new_address(), 1)  # a different history at the same heights
    chain.mine(1)
    rpc = rpc_for(chain)
    chain.finalize(max(d.block_number for d in deps))
    outcomes = {v.outcome for _, v in check(rpc, deps, rpc.finalized_block().number)}
    assert outcomes == {ChainOutcome.REORGED}


def test_reorg_that_reincludes_the_transfer_is_final_in_the_new_block(
        chain: Chain, token: Token) -> None:
    address = chain.new_address()
    chain.mine(1)  # a block before the deposits, replaced by the reorg too
    native_tx = chain.send_native(address, 3 * 10**17)  # block N
    token_tx = token.transfer(address, 5_000_000)  # block N+1
    deps = deliver(activities(chain, [native_tx, token_tx], {address}, [token]),
                   {address: "user-2"})
    reported = {d.tx_hash: d for d in deps}
    n = reported[native_tx].block_number
    assert reported[token_tx].block_number == n + 1
    raw_native = chain.rpc("eth_getRawTransactionByHash", native_tx)
    raw_token = chain.rpc("eth_getRawTransactionByHash", token_tx)
    # The last 3 blocks (N-1, N, N+1) replaced; the same signed transactions (same
    # hashes) all land in the new N+1, after an unrelated token transfer, so the native
    # deposit moves up one block and the token log's index shifts within its block.
    other = {"from": chain.accounts[1], "to": token.address,
             "data": token.contract.encode_abi(
                 "transfer", [Web3.to_checksum_address(chain.accounts[1]), 0])}
    chain.reorg(3, [(other, 2), (raw_native, 2), (raw_token, 2)])
    moved_token = chain.receipt(token_tx)
    assert moved_token is not None and int(moved_token["blockNumber"], 16) == n + 1
    assert moved_token["blockHash"] != reported[token_tx].block_hash
    assert int(chain.receipt(native_tx)["blockNumber"], 16) == n + 1

    rpc = rpc_for(chain)
    chain.finalize(n)  # the block the native deposit was REPORTED in is final ...
    verdicts = dict((d.tx_hash, v) for d, v in check(rpc, deps, rpc.finalized_block().number))
    # ... but the transfer now sits in a later block: wait for that one.
    assert verdicts[native_tx].outcome is ChainOutcome.NOT_YET
    assert verdicts[native_tx].reason == "moved_block_not_final"

    chain.finalize(n + 1)
    for deposit, verdict in check(rpc, deps, rpc.finalized_block().number):
        now = chain.receipt(deposit.tx_hash)
        assert verdict.outcome is ChainOutcome.FINAL, verdict
        assert verdict.moved
        assert verdict.block.number == int(now["blockNumber"], 16)
        assert verdict.block.hash == now["blockHash"]
        if deposit.kind is DepositKind.TOKEN:
            assert verdict.log_index == int(now["logs"][0]["logIndex"], 16)
            assert verdict.log_index != deposit.log_index  # found by content, not index


def test_a_tick_costs_calls_per_distinct_block_not_per_deposit(chain: Chain,
                                                              token: Token) -> None:
    chain.set_automine(False)
    try:
        deps = []
        blocks = 3
        for _ in range(blocks):
            addresses = [chain.new_address() for _ in range(20)]
            batch_tx = token.batch_transfer(addresses, list(range(1, 21)))
            native_txs = [chain.send_native(a, 10**15) for a in addresses[:5]]
            chain.mine(1)
            deps += deliver(activities(chain, [batch_tx, *native_txs], set(addresses),
                                       [token]), {a: f"u-{a[-6:]}" for a in addresses})
    finally:
        chain.set_automine(True)
    assert len(deps) == blocks * 25
    assert len({d.block_number for d in deps}) == blocks
    chain.finalize(max(d.block_number for d in deps))

    rpc = rpc_for(chain)
    counter = RpcCounter(rpc)
    finalized = rpc.finalized_block().number
    verdicts = check(rpc, deps, finalized)
    assert all(v.outcome is ChainOutcome.FINAL for _, v in verdicts)
    # 1 finalized + per block: receipts + the full block (it holds native deposits).
    assert counter.total == 1 + 2 * blocks
    assert counter.requests["eth_getBlockReceipts"] == blocks
    assert counter.round_trips == 2  # finalized + one JSON-RPC batch

    counter.reset()
    baseline = check_one_by_one(rpc, deps, finalized)
    assert counter.total == len(deps) + 5 * blocks  # a receipt each, + tx for natives
    assert [v for _, v in baseline] == [v for _, v in verdicts]


def test_watcher_credits_once_when_final_and_reports_metrics(chain: Chain,
                                                             token: Token) -> None:
    _, deps = deposit_pair(chain, token)
    ledger = MemoryLedger()
    for deposit in deps:
        ledger.add(deposit)
    watcher = FinalityWatcher(rpc_for(chain), ledger, ledger)
    finals = metrics.FINALISATIONS.labels(network=NETWORK, moved="false")
    before = finals._value.get()

    report = watcher.tick()
    assert report.delayed is None and report.final == 0 and ledger.emitted == []
    assert metrics.PENDING_DEPOSITS.labels(network=NETWORK)._value.get() == 2

    chain.finalize(max(d.block_number for d in deps))
    report = watcher.tick()
    assert (report.due, report.final, report.reorged) == (2, 2, 0)
    assert sorted(e["event_id"] for e in ledger.emitted) == \
        sorted(f"{d.event_id}:finalized" for d in deps)
    assert finals._value.get() == before + 2
    assert metrics.PENDING_DEPOSITS.labels(network=NETWORK)._value.get() == 0

    assert watcher.tick().due == 0  # nothing pending: nothing emitted twice
    assert len(ledger.emitted) == 2


def test_finalized_block_is_cached_for_its_ttl(chain: Chain) -> None:
    now = [0.0]
    rpc = ChainRpc(NETWORK, chain.url, timeout=5, finalized_ttl=0.5, clock=lambda: now[0])
    counter = RpcCounter(rpc)
    first = rpc.finalized_block()
    chain.mine(2)
    assert rpc.finalized_block() == first  # within the TTL: no second call
    assert counter.total == 1
    now[0] += 0.5
    assert rpc.finalized_block().number == first.number + 2
    assert counter.total == 2
