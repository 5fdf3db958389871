"""Chain finality (docs/finality.md) end to end on the REAL stack: real anvil transactions
(native coin and an ERC-20 deployed there), Alchemy payloads built from their receipts and
signed as Alchemy signs, POSTED to a real `paystream ingest`; outbox → Debezium → Kafka →
a real `paystream consume ledger`; a real `paystream consume finality` reading the same
anvil. See tests/support/chain/pipeline.py. The outage test stops and restarts the node
for real.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import UTC
from decimal import Decimal

import pytest
from web3 import Web3

from paystream.consumers.ledger.reconcile import find_mismatches
from paystream.schema import republish
from paystream.schema.db import connect, database_url
from paystream.schema.events import PAYMENTS_DLQ_TOPIC, PAYMENTS_TOPIC
from paystream.stack import anvil
from tests.support.chain.node import AnvilUnavailableError, Chain, Token
from tests.support.chain.pipeline import Pipeline, persisted_anvil, wait_for
from tests.support.topics import TopicReader

PORT = 18647
GRACE = 1  # finalized blocks past a missing tx's block before it is judged reorged


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    try:
        with persisted_anvil(PORT) as node:
            yield node
    except AnvilUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def pipe(chain: Chain) -> Iterator[Pipeline]:
    with Pipeline(chain, grace_blocks=GRACE) as p:
        yield p


@pytest.fixture(scope="module")
def dlq() -> Iterator[TopicReader]:
    reader = TopicReader(PAYMENTS_DLQ_TOPIC)
    yield reader
    reader.close()


def _reconciled(pipe: Pipeline, user: str) -> None:
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            _, mismatches = find_mismatches(cur, users=[user])
    finally:
        conn.close()
    assert mismatches == []


def _count(pipe: Pipeline, sql: str, *params) -> int:
    return int(pipe.query(sql, params)[0][0])


def test_pending_until_final_then_credited_once(pipe: Pipeline, chain: Chain,
                                                token: Token) -> None:
    user, address = pipe.new_user()
    wei, raw = 2 * 10**18 + 5, 7_250_000  # 2.000000000000000005 ETH, 7.25 PUSD
    native_tx = chain.send_native(address, wei)
    token_tx = token.transfer(address, raw)
    pipe.deliver([native_tx, token_tx], address, [token])
    eth, pusd = f"{pipe.network}:native", f"{pipe.network}:{token.address}"

    pipe.wait_states(user, lambda s: len(s) == 2 and set(s.values()) == {"pending"})
    wait_for("pending balances", lambda: pipe.balances(user) == {
        eth: (0, Decimal(wei) / 10**18), pusd: (0, Decimal(raw) / 10**6)})
    statuses = {s for (s,) in pipe.query(
        "SELECT status FROM payment_events JOIN event_status USING (event_id)"
        " WHERE user_id = %s", (user,))}
    assert statuses == {"pending_finality"}
    # Several watcher ticks with the chain standing still: nothing becomes final.
    time.sleep(4 * pipe.tick_seconds)
    assert set(pipe.states(user).values()) == {"pending"}
    assert chain.finalized() < chain.head()

    chain.finalize(chain.head())
    pipe.wait_states(user, lambda s: set(s.values()) == {"final"})
    wait_for("credited balances", lambda: pipe.balances(user) == {
        eth: (Decimal(wei) / 10**18, 0), pusd: (Decimal(raw) / 10**6, 0)})
    assert {s for (s,) in pipe.query(
        "SELECT status FROM payment_events JOIN event_status USING (event_id)"
        " WHERE user_id = %s", (user,))} == {"applied"}
    # Credited exactly once: one journal row per deposit, settlement ids derived from it.
    rows = pipe.query("SELECT source_event_id, event_type FROM user_entries"
                      " WHERE book = 'available' AND user_id = %s ORDER BY 1", (user,))
    assert len(rows) == 2 and {t for _, t in rows} == {"deposit_finalized"}
    assert _count(pipe, "SELECT count(*) FROM user_entries"
                  " WHERE book = 'pending' AND user_id = %s", user) == 4
    for dep in pipe.deposits(user).values():
        assert dep["final_block_number"] == dep["block_number"]
    # The deposits' idempotency outcome left the waiting pending_finality: final now.
    assert {o for (o,) in pipe.query(
        "SELECT p.outcome FROM processed_events p JOIN chain_deposits c"
        " ON p.event_id = c.event_id AND p.event_type = 'deposit'"
        " WHERE c.user_id = %s", (user,))} == {"applied"}
    # Each claim is filed under its event's day: the deposit's, the UTC day its row was
    # received on; its settlement's, the day the ledger recorded the deposit on.
    filed = pipe.query(
        "SELECT p.event_type, p.event_day, e.received_at, c.recorded_at FROM chain_deposits c"
        " JOIN payment_events e ON e.event_id = c.event_id JOIN processed_events p"
        " ON p.event_id IN (c.event_id, c.event_id || ':finalized') WHERE c.user_id = %s",
        (user,))
    assert sorted(t for t, *_ in filed) == ["deposit", "deposit", "deposit_finalized",
                                            "deposit_finalized"], filed
    for event_type, day, received_at, recorded_at in filed:
        assert day == (received_at if event_type == "deposit" else recorded_at
                       ).astimezone(UTC).date(), filed
    _reconciled(pipe, user)
    assert (pipe.metric("paystream_finality_finalisations_total", moved="false") or 0) >= 2


def test_a_settlement_published_again_after_a_failover_is_the_same_and_applies_once(
        pipe: Pipeline, chain: Chain, token: Token) -> None:
    """The window a failover's republish covers (docs/operations.md#cdc-across-a-failover):
    the watcher decided, its settlement is on Kafka, the ledger has not applied it. The
    copy published again from chain_deposits is the same message, and the deposit is
    credited once."""
    user, address = pipe.new_user()
    wei = 3 * 10**18 + 7
    pipe.deliver([chain.send_native(address, wei)], address)
    eth = f"{pipe.network}:native"
    pipe.wait_states(user, lambda s: len(s) == 1 and set(s.values()) == {"pending"})
    wait_for("the deposit held", lambda: pipe.balances(user) == {eth: (0, Decimal(wei) / 10**18)})
    reader = TopicReader(PAYMENTS_TOPIC)
    ledger = pipe.processes["ledger"]
    os.kill(ledger.pid, signal.SIGSTOP)
    try:
        chain.finalize(chain.head())
        pipe.wait_states(user, lambda s: set(s.values()) == {"finalizing"})
        conn = connect(database_url("owner"))
        try:
            with conn, conn.cursor() as cur:
                assert republish.unsettled_settlements(cur) >= 1
        finally:
            conn.close()
        (kept,), = pipe.query("SELECT settlement FROM chain_deposits WHERE user_id = %s",
                              (user,))
        copies = reader.read(2, 30, match=lambda m: m.key() == user.encode())
    finally:
        os.kill(ledger.pid, signal.SIGCONT)
        reader.close()
    assert kept["event_type"] == "deposit_finalized"
    assert len(copies) == 2, copies
    first, again = (json.loads(m.value()) for m in copies)
    assert first == again == kept
    pipe.wait_states(user, lambda s: set(s.values()) == {"final"})
    wait_for("credited once", lambda: pipe.balances(user) == {eth: (Decimal(wei) / 10**18, 0)})
    rows = pipe.query("SELECT source_event_id FROM user_entries"
                      " WHERE book = 'available' AND user_id = %s", (user,))
    assert rows == [(kept["event_id"],)]
    _reconciled(pipe, user)


def test_reorg_removing_the_tx_before_finality_is_never_credited(
        pipe: Pipeline, chain: Chain, token: Token) -> None:
    user, address = pipe.new_user()
    start = chain.head()
    token_tx = token.transfer(address, 3_000_000)
    native_tx = chain.send_native(address, 10**17)
    acts = pipe.deliver([token_tx, native_tx], address, [token])
    pipe.wait_states(user, lambda s: len(s) == 2 and set(s.values()) == {"pending"})
    reported = max(int(a["blockNum"], 16) for a in acts)

    chain.reorg(chain.head() - start)  # the deposit blocks replaced by empty ones
    assert chain.receipt(token_tx) is None and chain.receipt(native_tx) is None
    # Alchemy re-sends the removed token log with removed=true: a reorg suspect.
    removed = [dict(a, log={**a["log"], "removed": True}) for a in acts if "log" in a]
    pipe.post(removed)
    pipe.wait_states(user, lambda s: "suspect" in s.values())

    chain.finalize(reported + GRACE)
    pipe.wait_states(user, lambda s: set(s.values()) == {"reorged"})
    wait_for("pending released", lambda: all(
        b == (0, 0) for b in pipe.balances(user).values()))
    assert _count(pipe, "SELECT count(*) FROM user_entries"
                        " WHERE book = 'available' AND user_id = %s", user) == 0
    assert {s for (s,) in pipe.query(
        "SELECT status FROM payment_events JOIN event_status USING (event_id)"
        " WHERE user_id = %s", (user,))} == {"reorged"}
    assert {d["verdict_reason"] for d in pipe.deposits(user).values()} == {"tx_not_in_chain"}
    _reconciled(pipe, user)
    assert (pipe.metric("paystream_finality_reorgs_total", reason="tx_not_in_chain")
            or 0) >= 2


def test_reorg_reincluding_the_transfer_credits_once_under_the_new_block(
        pipe: Pipeline, chain: Chain, token: Token) -> None:
    user, address = pipe.new_user()
    chain.mine(1)  # a block before the deposits, replaced by the reorg too
    native_tx = chain.send_native(address, 3 * 10**17)  # block N
    token_tx = token.transfer(address, 5_000_000)  # block N+1
    first = pipe.deliver([native_tx, token_tx], address, [token])
    pipe.wait_states(user, lambda s: len(s) == 2 and set(s.values()) == {"pending"})
    n = int(chain.receipt(native_tx)["blockNumber"], 16)
    old_hash = chain.receipt(token_tx)["blockHash"]

    # Same signed transactions, all in the new block N+1 after an unrelated transfer:
    # the native deposit moves up a block, the token log changes block hash and index.
    raw_native = chain.rpc("eth_getRawTransactionByHash", native_tx)
    raw_token = chain.rpc("eth_getRawTransactionByHash", token_tx)
    other = {"from": chain.accounts[1], "to": token.address,
             "data": token.contract.encode_abi(
                 "transfer", [Web3.to_checksum_address(chain.accounts[1]), 0])}
    chain.reorg(3, [(other, 2), (raw_native, 2), (raw_token, 2)])
    new_token = chain.receipt(token_tx)
    assert int(new_token["blockNumber"], 16) == n + 1 and new_token["blockHash"] != old_hash
    # Alchemy's payload for the new canonical block: the native transfer keeps its event
    # id (ingest records a reorg notice), the token log has a new index, so a NEW event.
    second = pipe.deliver([native_tx, token_tx], address, [token])
    assert {a["log"]["logIndex"] for a in second if "log" in a} != \
        {a["log"]["logIndex"] for a in first if "log" in a}
    pipe.wait_states(user, lambda s: len(s) == 3 and "suspect" in s.values())

    chain.finalize(n + 1)
    final = pipe.wait_states(user, lambda s: sorted(s.values()) ==
                             ["final", "final", "reorged"])
    deps = pipe.deposits(user)
    for event_id, state in final.items():
        dep = deps[event_id]
        if state == "final":
            receipt = chain.receipt(dep["tx_hash"])
            assert dep["final_block_number"] == n + 1
            assert dep["final_block_hash"] == receipt["blockHash"]
        else:  # the same token transfer under its second event id
            assert dep["verdict_reason"] == "duplicate_transfer"
    eth, pusd = f"{pipe.network}:native", f"{pipe.network}:{token.address}"
    wait_for("credited once", lambda: pipe.balances(user) == {
        eth: (Decimal("0.3"), 0), pusd: (Decimal(5), 0)})
    _reconciled(pipe, user)


def test_rpc_outage_opens_the_breaker_and_delays_finality_only(
        pipe: Pipeline, chain: Chain, dlq: TopicReader) -> None:
    user, address = pipe.new_user()
    native_tx = chain.send_native(address, 4 * 10**17)
    pipe.deliver([native_tx], address)
    pipe.wait_states(user, lambda s: list(s.values()) == ["pending"])
    block = int(chain.receipt(native_tx)["blockNumber"], 16)

    assert chain.settings is not None and chain.config is not None
    assert anvil.stop(chain.settings, chain.config)  # the node really goes away
    wait_for("breaker open", lambda: pipe.metric("paystream_finality_breaker_state") == 2,
             timeout=20)
    assert (pipe.metric("paystream_finality_rpc_errors_total",
                        method="eth_getBlockByNumber") or 0) >= 3
    time.sleep(6 * pipe.tick_seconds)  # ticks during the outage decide nothing
    assert pipe.states(user) == {f"{pipe.network}:{native_tx}:external": "pending"}
    assert pipe.balances(user) == {f"{pipe.network}:native": (0, Decimal("0.4"))}
    assert (pipe.metric("paystream_finality_delayed_ticks_total", cause="breaker_open")
            or 0) >= 1

    assert anvil.start(chain.settings, chain.config)  # the same chain, from its state
    assert chain.head() >= block
    wait_for("breaker closed", lambda: pipe.metric("paystream_finality_breaker_state") == 0,
             timeout=20)
    chain.finalize(block)
    pipe.wait_states(user, lambda s: list(s.values()) == ["final"])
    wait_for("credited", lambda: pipe.balances(user) == {
        f"{pipe.network}:native": (Decimal("0.4"), 0)})
    # Nothing of this user was dead-lettered.
    dead = dlq.read(1, timeout=1.0, match=lambda m: (m.key() or b"").decode() == user)
    assert dead == []
    _reconciled(pipe, user)
