"""The generic gateway's body and the strict JSON reader."""

from __future__ import annotations

from decimal import Decimal

import pytest

from paystream.ingest.errors import PayloadError
from paystream.ingest.payments import parse_payment
from paystream.ingest.request_body import parse_json
from paystream.schema.events import EventType

VALID = {"event_id": "ev-1", "event_type": "withdrawal", "user_id": "alice", "amount": "2.50"}


def test_a_valid_body_becomes_an_event_with_the_default_asset() -> None:
    event = parse_payment(VALID, "USD")
    assert (event.event_id, event.event_type, event.user_id, event.asset, event.amount) == (
        "ev-1", EventType.WITHDRAWAL, "alice", "USD", Decimal("2.5"))
    assert parse_payment({**VALID, "asset": "EUR"}, "USD", {"USD", "EUR"}).asset == "EUR"


@pytest.mark.parametrize("event_type", ["deposit", "airdrop", "withdrawal", "withdrawal_fee"])
def test_every_event_type_is_accepted(event_type: str) -> None:
    assert parse_payment({**VALID, "event_type": event_type}, "USD").event_type == event_type


@pytest.mark.parametrize(("change", "message"), [
    ({"event_id": None}, "event_id is required"),
    ({"event_type": None}, "event_type is required"),
    ({"user_id": None}, "user_id is required"),
    ({"event_type": "bonus"}, "event_type must be one of"),
    ({"user_id": "al ice"}, "user_id has an invalid format"),
    ({"user_id": "x" * 65}, "user_id has an invalid format"),
    ({"event_id": "has space"}, "event_id has an invalid format"),
    ({"event_id": 12}, "event_id must be a string"),
    ({"amount": 2.5}, "JSON number"),
    ({"amount": "-1"}, "ASCII digits"),
    ({"amount": "0"}, "strictly positive"),
    ({"asset": "U S D"}, "asset has an invalid format"),
    ({"event_id": "ETH_MAINNET:0x" + "a" * 64 + ":log:1"}, "reserved for chain providers"),
    ({"event_id": "op:adjust:x"}, "may not start with op:"),
    # A statement line with no reference resolves to this id: a gateway may not take it.
    ({"event_id": "stmt:payments:tx-1"}, "may not start with .* stmt:"),
])
def test_invalid_bodies_are_refused_with_the_reason(change: dict, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        parse_payment({**VALID, **change}, "USD")


@pytest.mark.parametrize("asset", [
    "ETH_MAINNET:native",  # spendable at once, skipping finality: the finding
    "ETH_MAINNET:0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48",
    "MATIC_MAINNET:native",
])
def test_a_chain_asset_is_refused_saying_why(asset: str) -> None:
    with pytest.raises(PayloadError, match="chain asset") as refused:
        parse_payment({**VALID, "event_type": "deposit", "asset": asset}, "USD", {"USD"})
    assert refused.value.code == "unsupported_asset" and refused.value.status == 400


@pytest.mark.parametrize("asset", ["EUR", "usd", "eth_mainnet:native", "BTC"])
def test_only_the_allowed_assets_are_accepted(asset: str) -> None:
    with pytest.raises(PayloadError, match=f"asset '{asset}' is not one this gateway") as no:
        parse_payment({**VALID, "asset": asset}, "USD", {"USD", "GBP"})
    assert "allowed: GBP, USD" in no.value.detail
    assert parse_payment({**VALID, "asset": "GBP"}, "USD", {"USD", "GBP"}).asset == "GBP"


def test_without_a_list_only_the_default_asset_is_allowed() -> None:
    assert parse_payment(VALID, "USD").asset == "USD"
    with pytest.raises(PayloadError, match="not one this gateway may credit"):
        parse_payment({**VALID, "asset": "EUR"}, "USD")


def test_a_missing_amount_is_refused() -> None:
    body = dict(VALID)
    del body["amount"]
    with pytest.raises(PayloadError, match="amount is required"):
        parse_payment(body, "USD")


@pytest.mark.parametrize(("raw", "message"), [
    (b"{", "malformed JSON"),
    (b'{"a": NaN}', "NaN is not valid JSON"),
    (b'{"a": Infinity}', "Infinity is not valid JSON"),
    (b'{"amount": "1", "amount": "1000"}', "duplicate key 'amount'"),
    (b"\xff\xfe{}", "not valid UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 64"),  # no C stack overflow
    (b'{"a":' * 65 + b"1" + b"}" * 65, "nested deeper than 64"),
    (b'{"a": ' + b"1" * 5000 + b"}", "malformed JSON"),
])
def test_strict_json_refuses_what_parsers_disagree_on(raw: bytes, message: str) -> None:
    with pytest.raises(PayloadError, match=message):
        parse_json(raw)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = "[" * 200 + '\\"{'
    assert parse_json(b'{"note": ' + f'"{text}"'.encode() + b', "a": [[1]]}') == {
        "note": "[" * 200 + '"{', "a": [[1]]}
    assert len(parse_json(b"[" * 64 + b"]" * 64)) == 1  # exactly the limit is fine


def test_amount_numbers_stay_numbers_so_the_amount_rule_refuses_them() -> None:
    assert parse_json(b'{"amount": 50.1}') == {"amount": 50.1}


@pytest.mark.parametrize("raw", [
    rb'{"id": "\u0000"}',
    rb'{"event": {"note": "a\u0000b"}}',
    rb'{"list": ["x", "\\\u0000"]}',  # an escaped backslash, then the NUL escape
])
def test_a_nul_character_anywhere_is_refused(raw: bytes) -> None:
    with pytest.raises(PayloadError, match="NUL"):
        parse_json(raw)


def test_an_escaped_backslash_before_u0000_is_plain_text() -> None:
    assert parse_json(rb'{"id": "a\\u0000"}') == {"id": "a\\u0000"}
