"""The chain scanner's pure part (finality/scanner/blocks.py): range sizing, log decoding, and the
event it makes of a transfer, compared with the event the Alchemy path makes of the SAME
transfer (paystream.chaos.alchemy builds the payload from the same raw RPC answers)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from paystream.chaos import alchemy
from paystream.finality.evidence import TRANSFER_TOPIC, MalformedResultError
from paystream.finality.scanner.blocks import (
    GROW_AFTER,
    FoundTransfer,
    RangeSizer,
    decimals_answer,
    native_transfers,
    ours,
    ranges,
    token_transfer,
)
from paystream.ingest import alchemy as ingest_alchemy
from paystream.schema.chain import (
    SCANNER_PROVIDER,
    ExpectedDeposit,
    deposit_event_id,
    scanned_same_transfer,
)

NETWORK = "ETH_MAINNET"
TX = "0x" + "ab" * 32
BLOCK_HASH = "0x" + "cd" * 32
TOKEN = "0x" + "11" * 20
SENDER = "0x" + "22" * 20
ADDRESS = "0x" + "33" * 20
USER = "u1"


def _topic(address: str) -> str:
    return "0x" + "0" * 24 + address[2:]


def _log(raw: int, *, to: str = ADDRESS, index: int = 7, topics: list[str] | None = None,
         data: str | None = None) -> dict:
    return {"address": TOKEN, "topics": topics or [TRANSFER_TOPIC, _topic(SENDER), _topic(to)],
            "data": data if data is not None else "0x" + format(raw, "064x"),
            "blockNumber": hex(100), "blockHash": BLOCK_HASH, "transactionHash": TX,
            "transactionIndex": "0x0", "logIndex": hex(index), "removed": False}


def _tx(wei: int, to: str | None = ADDRESS) -> dict:
    return {"hash": TX, "from": SENDER, "to": to, "value": hex(wei),
            "blockNumber": hex(100), "blockHash": BLOCK_HASH}


def _alchemy_event(activity: dict):
    delivery = ingest_alchemy.parse_delivery(alchemy.payload([activity], network=NETWORK))
    events = ingest_alchemy.classify(delivery, {ADDRESS: USER}).events
    assert len(events) == 1
    return events[0]


# --- the event id and the content: the same transfer as the webhook reports it --------

def test_a_token_log_is_the_event_the_webhook_makes_of_it() -> None:
    log = _log(7_250_000)
    found = token_transfer(NETWORK, log)
    assert found is not None
    event = found.event(USER, 6)
    assert event is not None
    receipt = {"logs": [log]}
    webhook = _alchemy_event(alchemy.token_activities(
        receipt, watched={ADDRESS}, tokens={TOKEN: ("PUSD", 6)})[0])
    assert event.event_id == webhook.event_id == f"{NETWORK}:{TX}:log:7"
    assert (event.asset, event.amount) == (webhook.asset, webhook.amount) == (
        f"{NETWORK}:{TOKEN}", Decimal("7.25"))
    assert event.provider == SCANNER_PROVIDER and webhook.provider == "alchemy"
    assert event.content_hash() != webhook.content_hash()
    # ... yet one transfer: the ingest answers the webhook after the scan a duplicate.
    assert scanned_same_transfer(event.to_wire(), webhook.to_wire())
    assert ExpectedDeposit.from_chain(event.event_id, event.chain or {}) == \
        ExpectedDeposit.from_chain(webhook.event_id, webhook.chain or {})


def test_a_native_transfer_is_the_event_the_webhook_makes_of_it() -> None:
    wei = 2 * 10**18 + 5
    ref, found = native_transfers(NETWORK, {"number": hex(100), "hash": BLOCK_HASH,
                                            "transactions": [_tx(wei)]})
    assert (ref.number, ref.hash) == (100, BLOCK_HASH)
    event = found[0].event(USER, 18)
    assert event is not None
    webhook = _alchemy_event(alchemy.external_activity(
        _tx(wei), {"transactionHash": TX, "blockNumber": hex(100)}))
    assert event.event_id == webhook.event_id == f"{NETWORK}:{TX}:external"
    assert (event.asset, event.amount) == (webhook.asset, webhook.amount)
    assert scanned_same_transfer(event.to_wire(), webhook.to_wire())
    # The webhook carries no block hash for a native transfer, the scan does: both judge.
    scanned = ExpectedDeposit.from_chain(event.event_id, event.chain or {})
    assert scanned.block_hash == BLOCK_HASH and scanned.raw_value == wei


def test_the_identity_rule_is_the_one_alchemy_uses() -> None:
    assert deposit_event_id(NETWORK, TX.upper().replace("0X", "0x"), log_index=3) == \
        f"{NETWORK}:{TX}:log:3"
    assert deposit_event_id(NETWORK, TX, trace_address="0_1") == f"{NETWORK}:{TX}:trace:0_1"
    assert deposit_event_id(NETWORK, TX) == f"{NETWORK}:{TX}:external"


def test_another_transfer_under_the_same_id_is_no_duplicate() -> None:
    log = _log(7_250_000)
    found = token_transfer(NETWORK, log)
    assert found is not None
    scanned = found.event(USER, 6)
    assert scanned is not None
    webhook = _alchemy_event(alchemy.token_activities(
        {"logs": [_log(7_250_001)]}, watched={ADDRESS}, tokens={TOKEN: ("PUSD", 6)})[0])
    assert not scanned_same_transfer(scanned.to_wire(), webhook.to_wire())
    # Only the scanner's record is matched loosely: two providers must agree exactly.
    same = _alchemy_event(alchemy.token_activities(
        {"logs": [log]}, watched={ADDRESS}, tokens={TOKEN: ("PUSD", 6)})[0])
    assert not scanned_same_transfer(same.to_wire(), scanned.to_wire())
    # A different block hash is a different block: not the same report...
    other_block = {**scanned.to_wire(),
                   "chain": {**(scanned.chain or {}), "block_hash": "0x" + "ee" * 32}}
    assert not scanned_same_transfer(other_block, same.to_wire())
    # ... but the same transfer re-mined: the ingest records a reorg notice for it.
    assert scanned_same_transfer(other_block, same.to_wire(), any_block=True)
    assert not scanned_same_transfer(other_block, webhook.to_wire(), any_block=True)


# --- decoding ---------------------------------------------------------------------------

def test_only_erc20_transfers_are_decoded() -> None:
    nft = _log(0, topics=[TRANSFER_TOPIC, _topic(SENDER), _topic(ADDRESS), "0x" + "0" * 63 + "5"],
               data="0x")
    assert token_transfer(NETWORK, nft) is None
    assert token_transfer(NETWORK, {**_log(1), "removed": True}) is None
    assert token_transfer(NETWORK, _log(1, data="0x")) is None
    found = token_transfer(NETWORK, _log(2**255))
    assert found is not None and found.raw_value == 2**255 and found.recipient == ADDRESS
    with pytest.raises(MalformedResultError):
        token_transfer(NETWORK, {**_log(1), "transactionHash": None})


def test_native_transfers_skip_creations_and_zero_values() -> None:
    _, found = native_transfers(NETWORK, {"number": "0x64", "hash": BLOCK_HASH,
                                          "transactions": [_tx(0), _tx(5, to=None), _tx(9)]})
    assert [t.raw_value for t in found] == [9]


def test_ours_keeps_the_transfers_into_registered_addresses() -> None:
    a = FoundTransfer(NETWORK, TX, 1, BLOCK_HASH, SENDER, ADDRESS, 5)
    b = FoundTransfer(NETWORK, TX, 1, BLOCK_HASH, ADDRESS, SENDER, 5)
    assert ours([a, b], {ADDRESS: USER}) == [(a, USER)]


def test_no_event_for_what_cannot_be_credited() -> None:
    zero = FoundTransfer(NETWORK, TX, 1, BLOCK_HASH, SENDER, ADDRESS, 0)
    assert zero.event(USER, 18) is None
    # 10**40 base units at 0 decimals do not fit NUMERIC(38,18).
    huge = FoundTransfer(NETWORK, TX, 1, BLOCK_HASH, SENDER, ADDRESS, 10**40, TOKEN, 0)
    assert huge.event(USER, 0) is None


def test_decimals_answer() -> None:
    assert decimals_answer("0x" + format(6, "064x")) == 6
    assert decimals_answer(None) is None
    assert decimals_answer("0x") is None  # no such function: an empty return
    assert decimals_answer("0x" + format(256, "064x")) is None


# --- ranges -----------------------------------------------------------------------------

def test_ranges_cover_the_span_in_bounded_steps() -> None:
    assert list(ranges(10, 25, 7)) == [(10, 16), (17, 23), (24, 25)]
    assert list(ranges(5, 4, 7)) == []
    assert list(ranges(3, 3, 100)) == [(3, 3)]


def test_a_refused_range_is_halved_then_grows_back_to_the_limit_slowly() -> None:
    sizer = RangeSizer(100)
    assert sizer.next_range(0, 1000) == (0, 99)
    assert sizer.refused() and sizer.next_range(0, 1000) == (0, 49)
    for _ in range(GROW_AFTER - 1):
        sizer.answered()
    assert sizer.size == 50  # not yet: the node just refused 100
    sizer.answered()
    assert sizer.size == 100
    for _ in range(10):
        sizer.refused()
    assert sizer.size == 1 and not sizer.refused()
    for _ in range(10 * GROW_AFTER):
        sizer.answered()
    assert sizer.size == 100
    with pytest.raises(ValueError):
        RangeSizer(0)
