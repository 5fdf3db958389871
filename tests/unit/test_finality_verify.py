"""verify(): an expected deposit against chain evidence, without a node."""

from __future__ import annotations

import pytest

from paystream.finality import events
from paystream.finality.evidence import (
    TRANSFER_TOPIC,
    LogEntry,
    MalformedResultError,
    Receipt,
    Transaction,
    parse_receipt,
)
from paystream.finality.verify import ChainOutcome, verify
from paystream.schema.chain import DepositError, DepositKind, ExpectedDeposit

TX = "0x" + "ab" * 32
BLOCK_HASH = "0x" + "11" * 32
OTHER_HASH = "0x" + "22" * 32
TOKEN = "0x" + "cc" * 20
ALICE = "0x" + "a1" * 20
SENDER = "0x" + "5e" * 20


def topic(address: str) -> str:
    return "0x" + "00" * 12 + address[2:]


def transfer_log(index: int = 3, to: str = ALICE, value: int = 500,
                 address: str = TOKEN) -> LogEntry:
    return LogEntry(index, address, (TRANSFER_TOPIC, topic(SENDER), topic(to)),
                    "0x" + format(value, "064x"))


def receipt(*logs: LogEntry, block: int = 100, block_hash: str = BLOCK_HASH,
            status: int = 1) -> Receipt:
    return Receipt(TX, block, block_hash, status, SENDER, TOKEN, logs)


def token_deposit(**overrides) -> ExpectedDeposit:
    chain = {"network": "ETH_MAINNET", "category": "token", "tx_hash": TX.upper()[:2] + TX[2:],
             "block_number": 100, "block_hash": BLOCK_HASH, "log_index": 3,
             "trace_address": None, "token_contract": TOKEN, "raw_value": hex(500),
             "decimals": 6, "sender": SENDER, "recipient": ALICE, "removed": False}
    chain.update(overrides)
    return ExpectedDeposit.from_chain("ETH_MAINNET:tx:log:3", chain)


def native_deposit() -> ExpectedDeposit:
    return ExpectedDeposit.from_chain("ETH_MAINNET:tx:external", {
        "network": "ETH_MAINNET", "category": "external", "tx_hash": TX,
        "block_number": 100, "block_hash": None, "log_index": None, "trace_address": None,
        "token_contract": None, "raw_value": hex(10**18), "decimals": 18,
        "sender": SENDER, "recipient": ALICE, "removed": False})


def test_chain_dict_from_ingest_becomes_an_expected_deposit() -> None:
    d = token_deposit()
    assert d.kind is DepositKind.TOKEN and d.raw_value == 500 and d.log_index == 3
    assert native_deposit().kind is DepositKind.EXTERNAL
    assert native_deposit().needs_transaction and not d.needs_transaction
    with pytest.raises(DepositError):
        token_deposit(token_contract=None)
    with pytest.raises(DepositError):
        ExpectedDeposit.from_chain("x", {"category": "erc721"})


def test_not_yet_while_the_block_is_above_finalized() -> None:
    v = verify(token_deposit(), finalized=99, receipt=receipt(transfer_log()))
    assert v.outcome is ChainOutcome.NOT_YET and v.reason == "block_not_final"
    assert verify(token_deposit(), finalized=99, receipt=None).outcome is ChainOutcome.NOT_YET


def test_final_when_the_transfer_is_in_the_reported_block() -> None:
    v = verify(token_deposit(), finalized=100, receipt=receipt(transfer_log()))
    assert v.outcome is ChainOutcome.FINAL and not v.moved
    assert (v.block.number, v.block.hash, v.log_index) == (100, BLOCK_HASH, 3)


def test_missing_at_finality_is_reorged() -> None:
    v = verify(token_deposit(), finalized=120, receipt=None)
    assert (v.outcome, v.reason) == (ChainOutcome.REORGED, "tx_not_in_chain")


@pytest.mark.parametrize(("log", "reason"), [
    (transfer_log(index=4), "log_missing"),
    (transfer_log(value=501), "amount_mismatch"),
    (transfer_log(to="0x" + "b2" * 20), "recipient_mismatch"),
    (transfer_log(address="0x" + "dd" * 20), "token_contract_mismatch"),
    (LogEntry(3, TOKEN, (TRANSFER_TOPIC,), "0x"), "not_a_transfer"),
    (LogEntry(3, TOKEN, transfer_log().topics, transfer_log().data, removed=True),
     "log_removed"),
])
def test_a_different_transfer_is_reorged_never_final(log: LogEntry, reason: str) -> None:
    v = verify(token_deposit(), finalized=100, receipt=receipt(log))
    assert (v.outcome, v.reason) == (ChainOutcome.REORGED, reason)


def test_a_reverted_transaction_is_reorged() -> None:
    v = verify(token_deposit(), finalized=100, receipt=receipt(transfer_log(), status=0))
    assert (v.outcome, v.reason) == (ChainOutcome.REORGED, "tx_reverted")


def test_reincluded_elsewhere_is_final_in_the_new_block_found_by_content() -> None:
    moved = receipt(transfer_log(index=0, to=SENDER), transfer_log(index=7), block=101,
                    block_hash=OTHER_HASH)
    assert verify(token_deposit(), finalized=100, receipt=moved).reason == \
        "moved_block_not_final"
    v = verify(token_deposit(), finalized=101, receipt=moved)
    assert v.outcome is ChainOutcome.FINAL and v.moved
    assert (v.block.number, v.block.hash, v.log_index) == (101, OTHER_HASH, 7)
    # Same height, new hash: moved too.
    same_height = receipt(transfer_log(index=9), block_hash=OTHER_HASH)
    v = verify(token_deposit(), finalized=100, receipt=same_height)
    assert v.moved and v.log_index == 9


def test_native_deposits_are_checked_against_the_transaction() -> None:
    r = Receipt(TX, 100, BLOCK_HASH, 1, SENDER, ALICE, ())
    tx = Transaction(TX, 100, BLOCK_HASH, SENDER, ALICE, 10**18)
    v = verify(native_deposit(), finalized=100, receipt=r, transaction=tx)
    assert v.outcome is ChainOutcome.FINAL and not v.moved
    less = Transaction(TX, 100, BLOCK_HASH, SENDER, ALICE, 10**18 - 1)
    assert verify(native_deposit(), finalized=100, receipt=r, transaction=less).reason == \
        "amount_mismatch"
    elsewhere = Transaction(TX, 100, BLOCK_HASH, SENDER, SENDER, 10**18)
    assert verify(native_deposit(), finalized=100, receipt=r,
                  transaction=elsewhere).reason == "recipient_mismatch"
    with pytest.raises(ValueError):
        verify(native_deposit(), finalized=100, receipt=r)


def test_internal_transfers_are_final_with_their_value_unchecked() -> None:
    d = ExpectedDeposit("e", "ETH_MAINNET", DepositKind.INTERNAL, TX, 100, None, ALICE, 5,
                        trace_address="call_0_1")
    v = verify(d, finalized=100, receipt=Receipt(TX, 100, BLOCK_HASH, 1, SENDER, TOKEN, ()))
    assert v.outcome is ChainOutcome.FINAL and v.unchecked == ("internal_value",)


def test_events_carry_their_own_id_and_the_final_block() -> None:
    d = token_deposit()
    final = verify(d, finalized=100, receipt=receipt(transfer_log()))
    body = events.payload(d, final)
    assert body["event_id"] == f"{d.event_id}:finalized"
    assert body["event_type"] == "deposit_finalized"
    assert (body["block_number"], body["block_hash"], body["moved"]) == (100, BLOCK_HASH,
                                                                         False)
    gone = verify(d, finalized=120, receipt=None)
    assert events.payload(d, gone)["event_id"] == f"{d.event_id}:reorged"
    assert events.payload(d, gone)["reason"] == "tx_not_in_chain"


def test_receipts_from_a_node_are_parsed_and_lowercased() -> None:
    r = parse_receipt({
        "transactionHash": TX.upper().replace("0X", "0x"), "blockNumber": "0x64",
        "blockHash": BLOCK_HASH, "status": "0x1", "from": SENDER, "to": None,
        "logs": [{"logIndex": "0x3", "address": TOKEN.upper().replace("0X", "0x"),
                  "topics": list(transfer_log().topics), "data": transfer_log().data}]})
    assert r.tx_hash == TX and r.block_number == 100 and r.to is None
    assert r.logs[0].address == TOKEN
    with pytest.raises(MalformedResultError):
        parse_receipt({"transactionHash": TX, "blockNumber": "12"})
