"""Alchemy payloads -> deposit events and notices (pure: no database)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from paystream.ingest import alchemy
from paystream.ingest.errors import PayloadError
from paystream.ingest.notices import NoticeKind
from paystream.schema.events import EventType
from tests.support.ingest import (
    USDC,
    alchemy_body,
    erc20_activity,
    eth_activity,
    nft_activity,
    random_address,
    random_hash,
)

ALICE = "0x" + "a1" * 20
BOB = "0x" + "b0" * 20


def _delivery(activities: list[dict[str, Any]], **kwargs: Any) -> alchemy.AlchemyDelivery:
    return alchemy.parse_delivery(json.loads(alchemy_body(activities, **kwargs)))


def test_usdc_and_eth_deposits_become_exact_events_for_the_owner() -> None:
    usdc = erc20_activity(ALICE.upper().replace("0X", "0x"), 1_500_000, log_index=7)
    eth = eth_activity(BOB, 10**18 + 1)
    result = alchemy.classify(_delivery([usdc, eth]), {ALICE: "alice", BOB: "bob"})
    assert [e.user_id for e in result.events] == ["alice", "bob"]
    first, second = result.events
    assert first.amount == Decimal("1.5") and first.asset == f"ETH_MAINNET:{USDC}"
    assert first.event_type is EventType.DEPOSIT and first.provider == "alchemy"
    assert first.event_id == f"ETH_MAINNET:{usdc['hash']}:log:7"
    assert second.amount == Decimal("1.000000000000000001")
    assert second.asset == "ETH_MAINNET:native"
    assert second.event_id == f"ETH_MAINNET:{eth['hash']}:external"
    assert result.notices == ()


def test_the_chain_facts_travel_on_the_event() -> None:
    usdc = erc20_activity(ALICE, 2_000_000, log_index=31, block=0x10, block_hash="0x" + "c" * 64)
    (event,) = alchemy.classify(_delivery([usdc]), {ALICE: "alice"}).events
    assert event.chain == {
        "network": "ETH_MAINNET", "category": "erc20", "tx_hash": usdc["hash"],
        "block_number": 16, "block_hash": "0x" + "c" * 64, "log_index": 31,
        "token_contract": USDC, "raw_value": hex(2_000_000),
        "decimals": 6, "sender": usdc["fromAddress"], "recipient": ALICE, "removed": False,
    }


def test_facts_that_do_not_apply_are_absent_not_null() -> None:
    (event,) = alchemy.classify(_delivery([eth_activity(ALICE, 1)]), {ALICE: "alice"}).events
    assert event.chain is not None and None not in event.chain.values()
    assert "log_index" not in event.chain and "token_contract" not in event.chain


def test_the_float_value_is_never_used() -> None:
    usdc = erc20_activity(ALICE, 1_000_001)
    usdc["value"] = 999.0  # lies: only rawValue counts
    (event,) = alchemy.classify(_delivery([usdc]), {ALICE: "alice"}).events
    assert event.amount == Decimal("1.000001")


def test_the_same_transfer_in_another_payload_is_the_same_event() -> None:
    usdc = erc20_activity(ALICE, 5)
    one = alchemy.classify(_delivery([usdc], delivery_id="whevt_1"), {ALICE: "a"}).events
    two = alchemy.classify(_delivery([usdc], delivery_id="whevt_2"), {ALICE: "a"}).events
    assert one[0].event_id == two[0].event_id
    assert one[0].content_hash() == two[0].content_hash()


def test_internal_transfers_are_identified_by_their_trace_address() -> None:
    tx = random_hash()
    a = eth_activity(ALICE, 5, category="internal", tx_hash=tx, trace="call_0")
    b = eth_activity(ALICE, 5, category="internal", tx_hash=tx, trace="call_0_1")
    events = alchemy.classify(_delivery([a, b]), {ALICE: "alice"}).events
    assert [e.event_id for e in events] == [f"ETH_MAINNET:{tx}:trace:call_0",
                                            f"ETH_MAINNET:{tx}:trace:call_0_1"]


@pytest.mark.parametrize("decimals", [6, "0x6", "6"])
def test_decimals_may_be_an_int_or_a_hex_string(decimals: object) -> None:
    usdc = erc20_activity(ALICE, 2_500_000, decimals=decimals)
    (event,) = alchemy.classify(_delivery([usdc]), {ALICE: "alice"}).events
    assert event.amount == Decimal("2.5")


def test_unknown_addresses_are_ignored_with_a_reason() -> None:
    stranger = erc20_activity(random_address(), 10)
    outgoing = eth_activity(random_address(), 10, sender=ALICE)
    result = alchemy.classify(_delivery([stranger, outgoing]), {ALICE: "alice"})
    assert result.events == ()
    assert [(n.kind, n.reason) for n in result.notices] == [
        (NoticeKind.IGNORED, "unknown_address"), (NoticeKind.IGNORED, "outgoing_transfer")]


def test_nfts_are_recorded_never_credited() -> None:
    result = alchemy.classify(_delivery([nft_activity(ALICE)]), {ALICE: "alice"})
    assert result.events == ()
    assert [(n.kind, n.reason) for n in result.notices] == [(NoticeKind.NFT, "nft_transfer")]


def test_removed_logs_are_never_credited() -> None:
    usdc = erc20_activity(ALICE, 10, removed=True)
    result = alchemy.classify(_delivery([usdc]), {ALICE: "alice"})
    assert result.events == ()
    assert result.notices[0].kind is NoticeKind.REORG
    assert result.notices[0].event_id == f"ETH_MAINNET:{usdc['hash']}:log:0"


@pytest.mark.parametrize(("change", "reason"), [
    ({"rawValue": "0x0"}, "zero_value"),
    ({"rawValue": "0x"}, "zero_value"),
    ({"decimals": None}, "unknown_decimals"),
    ({"decimals": 24}, "amount_not_representable"),  # dust below 10^-18
])
def test_transfers_that_cannot_be_credited_exactly_are_kept_as_notices(
        change: dict[str, Any], reason: str) -> None:
    usdc = erc20_activity(ALICE, 3)
    usdc["rawContract"].update(change)
    result = alchemy.classify(_delivery([usdc]), {ALICE: "alice"})
    assert result.events == ()
    assert [(n.kind, n.reason) for n in result.notices] == [(NoticeKind.IGNORED, reason)]


def test_a_capacity_error_is_a_notice() -> None:
    delivery = _delivery([], error="capacity limit exceeded")
    assert delivery.transfers == ()
    assert [n.kind for n in delivery.notices] == [NoticeKind.CAPACITY_ERROR]


def test_other_webhook_types_are_unsupported_notices() -> None:
    obj = json.loads(alchemy_body([]))
    obj["type"] = "MINED_TRANSACTION"
    delivery = alchemy.parse_delivery(obj)
    assert [n.reason for n in delivery.notices] == ["unsupported_webhook_type"]


def test_notice_ids_are_stable_across_deliveries() -> None:
    activity = erc20_activity(random_address(), 10)
    one = alchemy.classify(_delivery([activity], delivery_id="whevt_1"), {}).notices
    two = alchemy.classify(_delivery([activity], delivery_id="whevt_2"), {}).notices
    assert one[0].notice_id == two[0].notice_id


def _broken(mutate) -> dict[str, Any]:
    obj = json.loads(alchemy_body([erc20_activity(ALICE, 1)]))
    mutate(obj)
    return obj


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda o: o.pop("event"), "event is required"),
    (lambda o: o.pop("type"), "type is required"),
    (lambda o: o["event"].pop("network"), "event.network is required"),
    (lambda o: o["event"].update(network="eth mainnet"), "event.network has an invalid"),
    (lambda o: o["event"].update(activity={}), "must be a list"),
    (lambda o: o["event"]["activity"][0].pop("hash"), r"activity\[0\].hash is required"),
    (lambda o: o["event"]["activity"][0].update(hash="0x12"), "hash has an invalid format"),
    (lambda o: o["event"]["activity"][0].update(blockNum="12"), "blockNum must be"),
    (lambda o: o["event"]["activity"][0]["log"].pop("logIndex"), "logIndex is required"),
    (lambda o: o["event"]["activity"][0]["rawContract"].update(rawValue="1.5"), "rawValue"),
    (lambda o: o["event"]["activity"][0]["rawContract"].update(decimals="0x1ff"), "decimals"),
    (lambda o: o["event"]["activity"][0]["rawContract"].update(decimals=True), "decimals"),
    (lambda o: o["event"]["activity"][0].update(toAddress=17), "toAddress is not an address"),
    (lambda o: o["event"]["activity"][0]["log"].update(removed="no"), "removed must be"),
])
def test_malformed_payloads_are_refused_naming_the_field(mutate, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        alchemy.parse_delivery(_broken(mutate))


def test_a_payload_must_be_an_object() -> None:
    with pytest.raises(PayloadError, match="JSON object"):
        alchemy.parse_delivery([1, 2])
