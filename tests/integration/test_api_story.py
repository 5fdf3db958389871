"""The merchant API's whole story on the REAL pipeline (docs/api.md#tests): a real anvil, a
signed Alchemy webhook to a real `paystream ingest`, outbox -> Debezium -> Kafka -> a
real `paystream consume ledger`, a real `paystream consume finality` (tests/support/
chain/pipeline.py), a signed gateway webhook, and a real `paystream api`.

Create a user and its address through the API; a chain deposit is pending, then final;
a gateway deposit in USD (what the gateway can pay out); a withdrawal requested through
the API is held; the gateway settles it; balances and history say so. Expected figures
are the amounts sent, worked out here by hand."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from paystream.consumers.ledger.reconcile import find_mismatches
from paystream.launch import free_port
from paystream.schema.db import connect, database_url
from tests.support.api import ApiServer, api_server, bearer, new_key
from tests.support.chain.node import AnvilUnavailableError, Chain
from tests.support.chain.pipeline import Pipeline, persisted_anvil
from tests.support.ids import unique
from tests.support.ingest import payment_body, payment_headers
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    try:
        with persisted_anvil(free_port()) as node:
            yield node
    except AnvilUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def pipe(chain: Chain) -> Iterator[Pipeline]:
    with Pipeline(chain) as p:
        yield p


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with api_server() as server:
        yield server


class Merchant:
    """A merchant's backend: its key, and the calls it makes."""

    def __init__(self, api: ApiServer, pipe: Pipeline) -> None:
        self.api, self.pipe = api, pipe
        self.headers = bearer(new_key("read,write")[1])

    def get(self, path: str, **params: Any) -> Any:
        self.pipe.check_alive()
        resp = httpx.get(self.api.url + path, headers=self.headers, params=params, timeout=10)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def post(self, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        return httpx.post(self.api.url + path, json=body,
                          headers={**self.headers, **headers}, timeout=10)

    def balances(self, user: str) -> dict[str, tuple[str, str, str]]:
        """asset -> (available, pending, held), as the API says."""
        return {b["asset"]: (b["available"], b["pending"], b["held"])
                for b in self.get(f"/v1/users/{user}/balances")["balances"]}

    def gateway(self, body: bytes) -> None:
        """A signed Standard Webhooks delivery from the payment gateway to the ingest."""
        resp = httpx.post(self.pipe.ingest_url + "/webhooks/payments", content=body,
                          headers=payment_headers(body), timeout=10)
        assert resp.status_code == 200, resp.text


def test_create_deposit_pending_final_withdraw_held_settled(
        api: ApiServer, pipe: Pipeline, chain: Chain) -> None:
    shop = Merchant(api, pipe)
    user, address = unique("story"), chain.new_address()
    # 1. The user and its deposit address, through the API.
    assert shop.post("/v1/users", {"user_id": user}).status_code == 201
    added = shop.post(f"/v1/users/{user}/deposit-addresses",
                      {"network": pipe.network, "address": address})
    assert added.status_code == 201, added.text

    # 2. A real chain deposit, reported by a signed Alchemy webhook: pending.
    wei = 2 * 10**18 + 5
    eth, amount = f"{pipe.network}:native", "2.000000000000000005"
    pipe.deliver([chain.send_native(address, wei)], address)
    wait_for("the deposit pending", lambda: shop.balances(user) == {eth: ("0", amount, "0")})
    (deposit,) = shop.get(f"/v1/users/{user}/transactions")["items"]
    assert deposit["event_type"] == "deposit"
    assert deposit["entries"] == [{"asset": eth, "book": "pending", "delta": amount}]
    event = shop.get(f"/v1/events/{deposit['event_id']}")
    assert (event["status"], event["outcome"]) == ("pending_finality", "pending_finality")
    assert event["trace_id"]

    # 3. Its block becomes final: credited once.
    chain.finalize(chain.head())
    wait_for("the deposit credited", lambda: shop.balances(user) == {eth: (amount, "0", "0")})
    assert shop.get(f"/v1/events/{deposit['event_id']}")["status"] == "applied"

    # 4. The gateway credits USD (what it can pay out), then a withdrawal is requested
    # through the API: held.
    shop.gateway(payment_body(unique("story-usd"), user, "100"))
    wait_for("the USD deposit", lambda: shop.balances(user).get("USD") == ("100", "0", "0"))
    requested = shop.post("/v1/withdrawals", {"user_id": user, "asset": "USD",
                                              "amount": "30", "destination": "iban:DE89"},
                          **{"Idempotency-Key": unique("order")})
    assert requested.status_code == 202, requested.text
    withdrawal_id = requested.json()["withdrawal_id"]
    wait_for("the hold", lambda: shop.get(f"/v1/withdrawals/{withdrawal_id}")["status"]
             == "held")
    assert shop.balances(user)["USD"] == ("70", "0", "30")

    # 5. The gateway settles it: paid out, nothing held any more.
    settle_id = unique("story-settle")
    shop.gateway(payment_body(settle_id, user, "30", "withdrawal_settled",
                              hold_id=withdrawal_id))
    wait_for("the settlement", lambda: shop.get(f"/v1/withdrawals/{withdrawal_id}")["status"]
             == "settled")
    assert shop.balances(user) == {eth: (amount, "0", "0"), "USD": ("70", "0", "0")}
    settled = shop.get(f"/v1/withdrawals/{withdrawal_id}")
    assert (settled["settled_amount"], settled["closed_by"]) == ("30", settle_id)
    assert settled["outcome"] == "applied"  # the request's own ledger outcome

    # 6. The history, newest first, each transfer naming its event, page by page.
    items, cursor = [], None
    while True:
        page = shop.get(f"/v1/users/{user}/transactions", limit=2,
                        **({"cursor": cursor} if cursor else {}))
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    story = [(i["event_type"], sorted((e["asset"], e["book"], e["delta"])
                                      for e in i["entries"])) for i in items]
    assert story == [
        ("withdrawal_settled", [("USD", "held", "-30")]),
        ("withdrawal_requested", [("USD", "available", "-30"), ("USD", "held", "30")]),
        ("deposit", [("USD", "available", "100")]),
        ("deposit_finalized", [(eth, "available", amount), (eth, "pending", "-" + amount)]),
        ("deposit", [(eth, "pending", amount)]),
    ]
    assert items[0]["event_id"] == settle_id and items[1]["event_id"] == withdrawal_id
    assert items[-1]["event_id"] == deposit["event_id"]
    # The books agree with themselves (postings = balances, zero-sum).
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            _, mismatches = find_mismatches(cur, users=[user])
    finally:
        conn.close()
    assert mismatches == []
    assert sum(Decimal(e["delta"]) for i in items for e in i["entries"]
               if e["asset"] == "USD") == Decimal(70)
