"""An invoice request's rules (invoices/create.py) and the invoice pages' cursor
(invoices/reads.py), pure; and the invoice routes as the merchant API's document and its
refusals before any database work show them. No services."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from starlette.testclient import TestClient

from paystream.api.app import create_app
from paystream.api.settings import ApiSettings
from paystream.invoices import create, reads
from paystream.refusals import Invalid

TOKEN = "0x" + "Ab" * 20


def _parse(**change: Any) -> create.InvoiceRequest:
    fields: dict[str, Any] = {"user_id": "u1", "asset": "USD", "amount": "10",
                              "expires_in_s": 3600}
    fields.update(change)
    extra = {k: fields.pop(k) for k in ("order_id", "metadata", "tolerance_pct")
             if k in fields}
    return create.parse_request(fields["user_id"], fields["asset"], fields["amount"],
                                fields["expires_in_s"], gateway_assets={"USD", "EUR"},
                                **extra)


def _refused(code: str, **change: Any) -> None:
    with pytest.raises(Invalid) as caught:
        _parse(**change)
    assert caught.value.code == code, caught.value.detail


def test_a_chain_asset_is_a_network_and_native_or_a_token_and_is_stored_as_a_deposit_names_it(
        ) -> None:
    assert create.chain_asset("ETH_MAINNET:native") == ("ETH_MAINNET", "ETH_MAINNET:native")
    assert create.chain_asset("eth_mainnet:NATIVE") == ("ETH_MAINNET", "ETH_MAINNET:native")
    assert create.chain_asset(f"ETH_MAINNET:{TOKEN}") == ("ETH_MAINNET",
                                                          f"ETH_MAINNET:{TOKEN.lower()}")
    for gateway in ("USD", "USD:x", "ETH_MAINNET:", ":native", "A-B:native", "X:0x12"):
        assert create.chain_asset(gateway) is None, gateway
    assert _parse(asset="eth_mainnet:native").network == "ETH_MAINNET"
    assert _parse(asset="USD").network is None


def test_an_invoice_request_names_its_first_broken_field() -> None:
    _refused("invalid_user_id", user_id="has space")
    _refused("unsupported_asset", asset="GBP")  # not the gateway's
    _refused("unsupported_asset", asset="USD:x")
    _refused("invalid_amount", amount="-1")
    _refused("invalid_amount", amount=10)  # a JSON number: never a float
    _refused("invalid_amount", amount="1e400")
    for bad in (59, 90 * 24 * 3600 + 1, True, 60.0, "3600"):
        _refused("invalid_expires_in_s", expires_in_s=bad)
    for bad in ("", "x" * 201, "tab\there", "nul\x00", "\ud800"):
        _refused("invalid_order_id", order_id=bad)
    for bad in ([1], "text", {"x": float("nan")}, {"x": "\x00"}, {"x": "\ud800"},
                {"x": "é" * 2100}):
        _refused("invalid_metadata", metadata=bad)
    for bad in ("100", "-1", "1.234", "1e1", 5, 2.5, Decimal("100"), Decimal("0.001")):
        _refused("invalid_tolerance", tolerance_pct=bad)


def test_what_an_invoice_request_keeps() -> None:
    made = _parse(order_id="ord #7 é", metadata={"b": [1, {"c": None}], "a": "x"},
                  tolerance_pct="2.5", amount="10.50", expires_in_s=60)
    assert (made.amount, made.tolerance_pct, made.expires_in_s) == (
        Decimal("10.5"), Decimal("2.5"), 60)
    assert made.order_id == "ord #7 é" and made.metadata == {"a": "x", "b": [1, {"c": None}]}
    assert _parse(metadata={"k": "v" * 4000}).metadata  # 4,008 bytes: within 4 KiB
    assert _parse(tolerance_pct=Decimal("1.5")).tolerance_pct == Decimal("1.5")
    assert _parse().tolerance_pct == 0 and _parse().metadata == {}


def test_the_same_request_is_one_hash_and_any_other_field_another() -> None:
    base = _parse(metadata={"a": 1, "b": 2}, tolerance_pct="2.50", order_id="o1")
    same = _parse(metadata={"b": 2, "a": 1}, tolerance_pct="2.5", order_id="o1",
                  amount="10.000", asset="usd".upper())
    assert base.request_hash() == same.request_hash()
    assert _parse(asset="eth_mainnet:native").request_hash() == _parse(
        asset="ETH_MAINNET:native").request_hash()
    others = [_parse(amount="11"), _parse(expires_in_s=3601), _parse(asset="EUR"),
              _parse(user_id="u2"), _parse(order_id="o2"), _parse(metadata={"a": 1}),
              _parse(tolerance_pct="1")]
    hashes = {o.request_hash() for o in others} | {base.request_hash()}
    assert len(hashes) == len(others) + 1


def test_a_page_cursor_names_its_last_invoice_exactly_and_others_are_refused() -> None:
    at = datetime(2026, 12, 5, 8, 0, 0, 123456, tzinfo=UTC)

    class Last:
        created_at = at
        invoice_id = "inv_" + "a" * 32

    text = reads.cursor_of(Last())  # type: ignore[arg-type]
    assert reads.parse_cursor(text) == (at, "inv_" + "a" * 32)
    assert reads.parse_cursor(None) is None and reads.parse_cursor("") is None
    for bad in ("!!", "abc", "MjAyNg", "x" * 401, "bm8tcGlwZQ",  # "no-pipe"
                "MjAyNi0xMi0wNVQwODowMDowMHxpbnY"):  # a time with no zone
        with pytest.raises(Invalid) as caught:
            reads.parse_cursor(bad)
        assert caught.value.code == "invalid_cursor"


def test_the_invoice_routes_are_in_the_document_with_their_answers() -> None:
    paths = create_app(ApiSettings(admin_port=8101)).api.openapi()["paths"]
    assert set(paths["/v1/invoices"]) == {"get", "post"}
    assert {"200", "201", "409"} <= set(paths["/v1/invoices"]["post"]["responses"])
    assert "get" in paths["/v1/invoices/{invoice_id}"]
    assert "post" in paths["/v1/invoices/{invoice_id}/cancel"]
    status = next(p for p in paths["/v1/invoices"]["get"]["parameters"]
                  if p["name"] == "status")
    assert "paid_late" in str(status["schema"])


def test_bad_invoice_requests_are_400_before_any_database_work() -> None:
    # TestClient's requests arrive on port 80: the public port when the admin one is not.
    with TestClient(create_app(ApiSettings(admin_port=8101)).__call__) as api:
        headers = {"Authorization": "Bearer psk_" + "x" * 43, "Idempotency-Key": "k1"}
        good = {"user_id": "u1", "asset": "USD", "amount": "1", "expires_in_s": 3600}
        for change in ({"expires_in_s": 59}, {"expires_in_s": "3600"},
                       {"payment_tolerance_pct": 2}, {"payment_tolerance_pct": "100"},
                       {"metadata": [1]}, {"order_id": ""}, {"extra": 1}):
            resp = api.post("/v1/invoices", json={**good, **change}, headers=headers)
            assert resp.status_code == 400, (change, resp.text)
            assert resp.json()["code"] == "invalid_request"
        resp = api.post("/v1/invoices", json=good, headers={"Authorization": "x"})
        assert resp.json()["code"] in ("missing_idempotency_key", "missing_api_key")
        for query in ("status=paid", "limit=0", "limit=501", "user_id=a%20b"):
            resp = api.get(f"/v1/invoices?{query}", headers=headers)
            assert resp.status_code == 400, (query, resp.text)


def test_addresses_add_is_either_one_users_address_or_pool_addresses(capsys: Any) -> None:
    from paystream.cli import main

    assert main(["addresses", "add", "--pool", "ETH_MAINNET"]) == 2
    assert "takes the addresses as arguments" in capsys.readouterr().err
    assert main(["addresses", "add", "--pool", "ETH_MAINNET", "0xab", "--user", "u1"]) == 2
    assert "without --network, --address, --user or --scan-from" in capsys.readouterr().err
    assert main(["addresses", "add", "--network", "ETH_MAINNET", "--user", "u1"]) == 2
    assert "missing: --address" in capsys.readouterr().err
    assert main(["addresses", "add", "--network", "N", "--address", "0xab", "--user", "u1",
                 "0xcd"]) == 2
    assert "extra arguments: 0xcd" in capsys.readouterr().err


def test_a_domain_refusal_is_answered_by_its_kind_at_the_http_edge() -> None:
    from paystream.edge.errors import refusal_of
    from paystream.refusals import Conflict, NotFound

    answers = [refusal_of(e) for e in (Invalid("bad", code="invalid_amount"),
                                       NotFound("gone", code="unknown_invoice"),
                                       Conflict("taken"))]
    assert [(a.status, a.code, a.detail) for a in answers] == [
        (400, "invalid_amount", "bad"), (404, "unknown_invoice", "gone"),
        (409, "conflict", "taken")]
