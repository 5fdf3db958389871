"""Credit before finality (docs/finality.md#credit-before-finality) end to end on the REAL
stack and a REAL anvil: a network with a credit depth credits a deposit before finality; a
reorg that removes its transaction is answered by a compensating debit, once; if the user
already withdrew the money, the shortfall is recorded and the account flagged, nothing
clamped silently, and reconcile still holds. Replays of the reversal (plain, and after its
idempotency row is purged) move nothing. See tests/support/chain/pipeline.py for the
processes."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from decimal import Decimal

import pytest

from paystream.consumers.ledger.reconcile import find_mismatches, reconcile
from paystream.launch import paystream_argv
from paystream.schema.db import connect, database_url
from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.schema.idempotency import idempotency_key
from paystream.schema.outbox import WriteOutcome, emit, write_event
from tests.support.chain.node import AnvilUnavailableError, Chain
from tests.support.chain.pipeline import Pipeline, persisted_anvil, wait_for
from tests.support.topics import TopicReader, headers_of

PORT = 18650
SLOTS = 4  # finalized = head - 8: room for a credit at depth 2 and a reorg before it
CREDIT_DEPTH = 2
GRACE = 1  # credit-height blocks a credited tx may stay missing before the reversal


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    try:
        with persisted_anvil(PORT, slots_in_an_epoch=SLOTS) as node:
            yield node
    except AnvilUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def pipe(chain: Chain) -> Iterator[Pipeline]:
    with Pipeline(chain, grace_blocks=GRACE, credit_depth=CREDIT_DEPTH) as p:
        yield p


@pytest.fixture
def payments() -> Iterator[TopicReader]:
    reader = TopicReader(PAYMENTS_TOPIC)
    yield reader
    reader.close()


def _mismatches(user: str) -> list:
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            return find_mismatches(cur, users=[user])[1]
    finally:
        conn.close()


def _payment(pipe: Pipeline, user: str, event_type: str, amount: str) -> str:
    """A deposit / withdrawal in the chain asset, written through the outbox as the ingest
    writes an event (schema.outbox.write_event). Not through the gateway endpoint: a
    gateway may not move chain assets (PAYMENTS_ASSETS refuses them); this stands for the
    platform's own chain withdrawal, which reaches the ledger by the same outbox."""
    event_id = f"{event_type}-{uuid.uuid4().hex[:10]}"
    event = PaymentEvent(event_id=event_id, event_type=EventType(event_type), user_id=user,
                         asset=f"{pipe.network}:native", amount=Decimal(amount),
                         provider="payments")
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            assert write_event(cur, event, "trace-" + event_id) is WriteOutcome.ACCEPTED
    finally:
        conn.close()
    return event_id


def _status(pipe: Pipeline, event_id: str) -> str | None:
    rows = pipe.query("SELECT status FROM event_status WHERE event_id = %s", (event_id,))
    return rows[0][0] if rows else None


def _wait_status(pipe: Pipeline, event_id: str, status: str) -> None:
    wait_for(f"{event_id} {status}", lambda: _status(pipe, event_id) == status)


def _credited_deposit(pipe: Pipeline, chain: Chain, wei: int) -> tuple[str, str, int, int]:
    """A native deposit credited at the credit depth, before finality.
    Returns (user, deposit event id, block before it, its block)."""
    user, address = pipe.new_user()
    start = chain.head()
    tx = chain.send_native(address, wei)
    # Automine answers before the block is always readable on a loaded machine.
    wait_for("the deposit mined", lambda: chain.receipt(tx), timeout=10)
    pipe.deliver([tx], address)
    deposit_id = f"{pipe.network}:{tx}:external"
    pipe.wait_states(user, {deposit_id: "pending"})
    block = int(chain.receipt(tx)["blockNumber"], 16)
    chain.mine(CREDIT_DEPTH)
    pipe.wait_states(user, {deposit_id: "credited"})
    assert chain.finalized() < block  # credited, not final
    amount = Decimal(wei) / 10**18
    wait_for("credited to available", lambda: pipe.balances(user) == {
        f"{pipe.network}:native": (amount, 0)})
    assert _status(pipe, deposit_id) == "credited"
    return user, deposit_id, start, block


def _reorg_out(pipe: Pipeline, chain: Chain, start: int, block: int,
               deposit_id: str) -> None:
    """Replace every block since `start` (the deposit's included) with empty ones; once
    the watcher has seen the credited tx missing at the credit height (its grace clock
    starts), move the credit height GRACE blocks on: it reverses, before finality."""
    chain.reorg(chain.head() - start)
    assert chain.receipt(deposit_id.split(":")[1]) is None
    since = wait_for("the credited deposit seen missing", lambda: pipe.query(
        "SELECT missing_since_block FROM chain_deposits WHERE event_id = %s",
        (deposit_id,))[0][0])
    assert since == chain.head() - CREDIT_DEPTH
    assert pipe.query("SELECT state FROM chain_deposits WHERE event_id = %s",
                      (deposit_id,)) == [("credited",)]  # not yet: the tx may come back
    chain.mine(GRACE)
    assert chain.finalized() < block


def _outcome(pipe: Pipeline, event_id: str, event_type: str) -> str | None:
    rows = pipe.query("SELECT outcome FROM processed_events WHERE idempotency_key = %s",
                      (idempotency_key(event_id, event_type),))
    return rows[0][0] if rows else None


def test_credited_before_finality_then_final_moves_no_more_money(
        pipe: Pipeline, chain: Chain) -> None:
    user, deposit_id, _, block = _credited_deposit(pipe, chain, 2 * 10**18)
    # Housekeeping must keep both waiting keys while a reorg could still reverse it.
    assert _outcome(pipe, deposit_id, "deposit") == "pending_finality"
    assert _outcome(pipe, f"{deposit_id}:credited", "deposit_credited") == "credited"
    chain.finalize(block)
    pipe.wait_states(user, {deposit_id: "final"})
    _wait_status(pipe, deposit_id, "applied")
    assert pipe.balances(user) == {f"{pipe.network}:native": (Decimal(2), 0)}
    # Credited once: one available journal row (the credit), none at finality.
    assert pipe.query("SELECT event_type, delta FROM user_entries"
                      " WHERE book = 'available' AND user_id = %s",
                      (user,)) == [("deposit_credited", Decimal(2))]
    assert _outcome(pipe, deposit_id, "deposit") == "applied"
    assert _outcome(pipe, f"{deposit_id}:credited", "deposit_credited") == "applied"
    assert _mismatches(user) == []


def test_reorg_after_the_credit_debits_it_once_and_replays_are_no_ops(
        pipe: Pipeline, chain: Chain, payments: TopicReader) -> None:
    user, deposit_id, start, block = _credited_deposit(pipe, chain, 10**18)
    asset = f"{pipe.network}:native"
    _reorg_out(pipe, chain, start, block, deposit_id)
    pipe.wait_states(user, {deposit_id: "reversed"})
    _wait_status(pipe, deposit_id, "reversed")
    assert pipe.balances(user) == {asset: (0, 0)}  # the balance is back
    assert pipe.query("SELECT event_type, delta FROM user_entries"
                      " WHERE book = 'available' AND user_id = %s"
                      " ORDER BY transfer_id", (user,)) == \
        [("deposit_credited", Decimal(1)), ("deposit_reversed", Decimal(-1))]
    reversal_id = f"{deposit_id}:reversed"
    assert _outcome(pipe, reversal_id, "deposit_reversed") == "applied"
    assert _outcome(pipe, deposit_id, "deposit") == "reversed"
    assert pipe.query("SELECT count(*) FROM account_shortfalls WHERE user_id = %s",
                      (user,)) == [(0,)]
    assert pipe.deposits(user)[deposit_id]["verdict_reason"] == "tx_not_in_chain"
    assert (pipe.metric("paystream_finality_reversals_total", reason="tx_not_in_chain")
            or 0) >= 1
    assert _mismatches(user) == []

    # The reversal as Kafka carried it, sent again through the outbox (a redelivery).
    [message] = payments.read(1, timeout=20, match=lambda m: headers_of(m).get(
        "event_id") == reversal_id)
    wire = json.loads(message.value())

    def replay(label: str) -> None:
        conn = connect(database_url("owner"))
        try:
            with conn, conn.cursor() as cur:
                emit(cur, aggregatetype="payments", aggregateid=user,
                     event_type="deposit_reversed", event_id=reversal_id, payload=wire,
                     trace_id=f"replay-{label}")
        finally:
            conn.close()
        # A withdrawal after it in the same partition: once it is judged, the replay
        # before it has been too.
        sentinel = _payment(pipe, user, "withdrawal", "0.01")
        _wait_status(pipe, sentinel, "rejected")

    journal = pipe.query("SELECT count(*) FROM user_entries"
                         " WHERE book = 'available' AND user_id = %s", (user,))
    replay("plain")
    assert pipe.balances(user) == {asset: (0, 0)}
    assert pipe.query("SELECT count(*) FROM user_entries WHERE book = 'available' AND user_id = %s",
                      (user,)) == journal
    # Housekeeping forgot the reversal's key (past its TTL): still a no-op.
    pipe.query("DELETE FROM processed_events WHERE idempotency_key = %s RETURNING 1",
               (idempotency_key(reversal_id, "deposit_reversed"),))
    replay("after-purge")
    assert pipe.balances(user) == {asset: (0, 0)}
    assert pipe.query("SELECT count(*) FROM user_entries WHERE book = 'available' AND user_id = %s",
                      (user,)) == journal
    assert _outcome(pipe, reversal_id, "deposit_reversed") == "applied"
    assert pipe.query("SELECT count(*) FROM account_shortfalls WHERE user_id = %s",
                      (user,)) == [(0,)]
    assert _mismatches(user) == []


def test_reorg_after_the_user_withdrew_records_a_shortfall_and_flags_the_account(
        pipe: Pipeline, chain: Chain) -> None:
    user, deposit_id, start, block = _credited_deposit(pipe, chain, 10**18)
    asset = f"{pipe.network}:native"
    withdrawal = _payment(pipe, user, "withdrawal", "0.7")  # the credit is spendable
    _wait_status(pipe, withdrawal, "applied")
    assert pipe.balances(user) == {asset: (Decimal("0.3"), 0)}

    _reorg_out(pipe, chain, start, block, deposit_id)
    pipe.wait_states(user, {deposit_id: "reversed"})
    _wait_status(pipe, deposit_id, "reversed")
    # What was there is taken, never below zero; the rest is owed, on record.
    assert pipe.balances(user) == {asset: (0, 0)}
    reversal_id = f"{deposit_id}:reversed"
    assert pipe.query("SELECT delta FROM user_entries"
                      " WHERE book = 'available' AND source_event_id = %s",
                      (reversal_id,)) == [(Decimal("-0.3"),)]
    assert pipe.query(
        "SELECT asset, amount, deposit_event_id, resolved_at FROM account_shortfalls"
        " WHERE user_id = %s", (user,)) == [(asset, Decimal("0.7"), deposit_id, None)]
    assert _outcome(pipe, reversal_id, "deposit_reversed") == "shortfall"
    # Double entry: the chain took the whole deposit back out of custody; what the user
    # could not pay is the platform's receivable.
    assert sorted(pipe.query(
        "SELECT a.kind, a.owner, p.amount FROM postings p JOIN transfers t USING (transfer_id)"
        " JOIN accounts a USING (account_id) WHERE t.source_event_id = %s",
        (reversal_id,))) == [("available", user, Decimal("-0.3")),
                            ("custody", pipe.network, Decimal(1)),
                            ("receivable", "platform", Decimal("-0.7"))]
    # The journal holds exactly what moved: reconcile is clean, and names the flag.
    assert _mismatches(user) == []
    conn = connect(database_url("owner"))
    try:
        report = reconcile(conn, users=[user])
    finally:
        conn.close()
    assert report.clean
    assert [(s.user_id, s.owed) for s in report.flagged] == [(user, Decimal("0.7"))]

    # Flagged: new money still lands, but no withdrawal leaves until it is resolved.
    top_up = _payment(pipe, user, "deposit", "5")
    _wait_status(pipe, top_up, "applied")
    refused = _payment(pipe, user, "withdrawal", "1")
    _wait_status(pipe, refused, "rejected")
    assert _outcome(pipe, refused, "withdrawal") == "account_flagged"
    assert pipe.balances(user) == {asset: (Decimal(5), 0)}
    assert _mismatches(user) == []

    # An operator lists it, records how it was settled, and the flag is lifted.
    listed = _cli("shortfalls", "--user", user)
    assert listed.returncode == 1, listed.stderr  # open shortfalls: something to act on
    [row] = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert row[1:4] == [user, asset, "0.7"] and row[-1] == "OPEN"
    assert _cli("shortfalls", "resolve", row[0]).returncode == 2  # --resolution required
    done = _cli("shortfalls", "resolve", row[0], "--resolution", "recovered by card")
    assert done.returncode == 0, done.stderr
    assert "no longer flagged" in done.stdout
    again = _cli("shortfalls", "resolve", row[0], "--resolution", "twice")
    assert again.returncode == 2 and "already resolved" in again.stderr
    assert _cli("shortfalls", "--user", user).stdout.strip() == "shortfalls: none open"
    paid_out = _payment(pipe, user, "withdrawal", "1")
    _wait_status(pipe, paid_out, "applied")
    assert pipe.balances(user) == {asset: (Decimal(4), 0)}
    assert _mismatches(user) == []


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(paystream_argv(*args),
                          capture_output=True, text=True, timeout=60)
