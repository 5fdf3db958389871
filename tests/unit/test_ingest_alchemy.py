"""Alchemy payloads -> deposit events and notices (pure: no database)."""

from __future__ import annotations

import json
import re
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
    assert delivery.activities == ()
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
])
def test_a_malformed_envelope_is_refused_naming_the_field(mutate, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        alchemy.parse_delivery(_broken(mutate))


def test_a_payload_must_be_an_object() -> None:
    with pytest.raises(PayloadError, match="JSON object"):
        alchemy.parse_delivery([1, 2])


def _activity(mutate) -> dict[str, Any]:
    activity = erc20_activity(ALICE, 1_000_000)
    mutate(activity)
    return activity


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda a: a.pop("hash"), r"activity\[0\].hash is required"),
    (lambda a: a.update(hash="0x12"), "hash has an invalid format"),
    (lambda a: a.update(blockNum="12"), "blockNum must be"),
    (lambda a: a["log"].pop("logIndex"), "logIndex is required"),
    (lambda a: a["rawContract"].update(rawValue="1.5"), "rawValue"),
    (lambda a: a["rawContract"].update(decimals="0x1ff"), "decimals"),
    (lambda a: a["rawContract"].update(decimals=True), "decimals"),
    (lambda a: a["log"].update(removed="no"), "removed must be"),
    (lambda a: a["log"].update(blockHash=["0x"]), "blockHash"),
])
def test_a_broken_deposit_to_a_user_is_kept_as_a_notice_naming_the_field(mutate,
                                                                         message: str) -> None:
    """Never a 400: the provider would send the same bytes again until it pauses the
    webhook. The notice keeps the activity and whose it is, for a person to review."""
    result = alchemy.classify(_delivery([_activity(mutate)]), {ALICE: "alice"})
    assert result.events == ()
    [notice] = result.notices
    assert (notice.kind, notice.reason) == (NoticeKind.IGNORED, "unusable_activity")
    assert notice.detail["user_id"] == "alice"
    assert re.search(message, notice.detail["defect"])


def test_a_broken_activity_does_not_hold_back_the_others_of_its_delivery() -> None:
    broken = _activity(lambda a: a.pop("hash"))
    good = erc20_activity(BOB, 2_000_000, log_index=4)
    result = alchemy.classify(_delivery([broken, good]), {ALICE: "alice", BOB: "bob"})
    assert [(e.user_id, e.amount) for e in result.events] == [("bob", Decimal(2))]
    assert [n.reason for n in result.notices] == ["unusable_activity"]


def test_a_malformed_recipient_can_be_no_ones_deposit() -> None:
    result = alchemy.classify(_delivery([_activity(lambda a: a.update(toAddress=17))]),
                              {ALICE: "alice"})
    assert result.events == ()
    [notice] = result.notices
    assert notice.reason == "unknown_address"
    assert "toAddress is not an address" in notice.detail["defect"]


@pytest.mark.parametrize("activity", [17, None, "0x", [], {}])
def test_an_activity_that_is_not_a_transfer_object_is_a_notice(activity: Any) -> None:
    result = alchemy.classify(_delivery([activity]), {ALICE: "alice"})
    assert result.events == ()
    assert [n.kind for n in result.notices] == [NoticeKind.UNSUPPORTED]


# Block numbers go to BIGINT columns, log indexes to INTEGER ones.
@pytest.mark.parametrize(("block", "log_index"), [(2**63 - 1, 0), (1, 2**31 - 1)])
def test_block_numbers_and_log_indexes_up_to_the_column_limits_are_credited(
        block: int, log_index: int) -> None:
    usdc = erc20_activity(ALICE, 5, block=block, log_index=log_index)
    (event,) = alchemy.classify(_delivery([usdc]), {ALICE: "alice"}).events
    assert event.chain is not None
    assert (event.chain["block_number"], event.chain["log_index"]) == (block, log_index)


@pytest.mark.parametrize(("block", "log_index", "field"), [
    (2**63, 0, "blockNum"), (2**64 + 5, 0, "blockNum"), (1, 2**31, "logIndex"),
    (1, 2**64, "logIndex"),
])
def test_numbers_past_the_column_limits_are_out_of_range_notices(
        block: int, log_index: int, field: str) -> None:
    usdc = erc20_activity(ALICE, 5, block=block, log_index=log_index)
    result = alchemy.classify(_delivery([usdc]), {ALICE: "alice"})
    assert result.events == ()
    [notice] = result.notices
    assert (notice.kind, notice.reason) == (NoticeKind.IGNORED, "out_of_range")
    assert field in notice.detail["defect"] and notice.detail["user_id"] == "alice"


def test_a_raw_value_past_uint256_is_out_of_range() -> None:
    # chain_deposits.raw_value is NUMERIC(78,0): 10^80 base units with 70 decimals is a
    # fine amount (10^10) that the ledger could not have stored.
    usdc = erc20_activity(ALICE, 10**80, decimals=70)
    result = alchemy.classify(_delivery([usdc]), {ALICE: "alice"})
    assert result.events == ()
    assert [n.reason for n in result.notices] == ["out_of_range"]
    assert "rawValue" in result.notices[0].detail["defect"]
    within = erc20_activity(ALICE, 10**77, decimals=70)  # 10^77 < 2^256
    (event,) = alchemy.classify(_delivery([within]), {ALICE: "alice"}).events
    assert event.amount == Decimal(10**7)
    assert event.chain is not None and int(event.chain["raw_value"], 16) == 10**77


def test_json_integers_are_bounded_like_hex_quantities() -> None:
    usdc = erc20_activity(ALICE, 5)
    usdc["blockNum"] = 2**63
    result = alchemy.classify(_delivery([usdc]), {ALICE: "alice"})
    assert [n.reason for n in result.notices] == ["out_of_range"]


def test_an_event_id_too_long_for_its_settlements_is_out_of_range() -> None:
    # The longest network name and trace address make a 202-character id; the
    # watcher's "<id>:finalized" must still be a valid event id (at most 200).
    network = "N" * 64
    internal = eth_activity(ALICE, 5, category="internal", trace="c" * 64)
    result = alchemy.classify(_delivery([internal], network=network), {ALICE: "alice"})
    assert result.events == ()
    assert [n.reason for n in result.notices] == ["out_of_range"]
    shorter = eth_activity(ALICE, 5, category="internal", trace="c" * 52)
    (event,) = alchemy.classify(_delivery([shorter], network=network), {ALICE: "a"}).events
    assert len(event.event_id + ":finalized") == 200
    one_more = eth_activity(ALICE, 5, category="internal", trace="c" * 53)
    result = alchemy.classify(_delivery([one_more], network=network), {ALICE: "alice"})
    assert [n.reason for n in result.notices] == ["out_of_range"]


def _alchemy_docs_erc721_example(to: str) -> dict[str, Any]:
    """The ERC-721 activity of Alchemy's Address Activity docs (MATIC_MAINNET example):
    category "token", a token id, rawValue "0x", and no transaction hash or blockNum on
    the activity itself (only inside its log)."""
    return {
        "category": "token",
        "fromAddress": "0x59479de9d374bdbcba6c791e5d036591976fe422",
        "toAddress": to,
        "erc721TokenId": "0x1",
        "rawContract": {"rawValue": "0x",
                        "address": "0x93C46aA4DdfD0413d95D0eF3c478982997cE9861"},
        "log": {"removed": False, "address": "0x93c46aa4ddfd0413d95d0ef3c478982997ce9861",
                "data": "0x", "topics": [
                    "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef",
                    "0x00000000000000000000000059479de9d374bdbcba6c791e5d036591976fe422",
                    "0x00000000000000000000000059479de9d374bdbcba6c791e5d036591976fe425",
                    "0x0000000000000000000000000000000000000000000000000000000000000001"]},
    }


@pytest.mark.parametrize("owned", [True, False])
def test_alchemys_own_erc721_example_is_an_nft_notice_not_a_refusal(owned: bool) -> None:
    to = "0x59479de9d374bdbcba6c791e5d036591976fe425"
    delivery = _delivery([_alchemy_docs_erc721_example(to)], network="MATIC_MAINNET")
    result = alchemy.classify(delivery, {to: "alice"} if owned else {})
    assert result.events == ()
    assert [(n.kind, n.reason) for n in result.notices] == [(NoticeKind.NFT, "nft_transfer")]
    assert "hash is required" in result.notices[0].detail["defect"]


def test_a_removed_log_missing_fields_is_still_a_reorg_notice() -> None:
    usdc = erc20_activity(ALICE, 10, removed=True)
    del usdc["hash"]
    result = alchemy.classify(_delivery([usdc]), {ALICE: "alice"})
    assert result.events == ()
    assert [n.kind for n in result.notices] == [NoticeKind.REORG]


def test_an_unknown_address_needs_no_complete_fields() -> None:
    stranger = erc20_activity(random_address(), 10)
    del stranger["log"]["logIndex"], stranger["blockNum"]
    result = alchemy.classify(_delivery([stranger]), {ALICE: "alice"})
    assert [n.reason for n in result.notices] == ["unknown_address"]


def test_a_notice_keeps_a_non_finite_number_as_text() -> None:
    # The parser reads 1e400 as infinity; jsonb cannot store it, and a notice refused by
    # the database would be a 400 the provider retries forever.
    stranger = eth_activity(random_address(), 5)
    stranger["value"] = float("inf")
    stranger["rawContract"]["extra"] = [float("-inf")]
    [notice] = alchemy.classify(_delivery([stranger]), {}).notices
    assert notice.detail["activity"]["value"] == "inf"
    assert notice.detail["activity"]["rawContract"]["extra"] == ["-inf"]
    json.dumps(notice.detail, allow_nan=False)  # strict JSON, as jsonb wants it
    error = alchemy.parse_delivery({"type": "ADDRESS_ACTIVITY",
                                    "event": {"error": {"limit": float("inf")}}})
    json.dumps(error.notices[0].detail, allow_nan=False)
