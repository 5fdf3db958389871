"""The gateway credits only the assets of PAYMENTS_ASSETS, on a real server
(docs/ingest.md#payment-gateway).

On main before the fix, a gateway deposit of `ETH_MAINNET:native` was accepted and
spendable at once: a chain asset without a chain deposit, skipping finality.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.ids import unique
from tests.support.ingest import (
    RunningServer,
    ingest_server,
    known_user,
    payment_body,
    payment_headers,
)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with ingest_server({"PAYMENTS_ASSETS": "USD,EUR"}) as srv:
        yield srv


def _send(server: RunningServer, event_id: str, asset: object) -> httpx.Response:
    body = payment_body(event_id, known_user("asset-user"), "5", asset=asset)
    return httpx.post(server.url + "/webhooks/payments", content=body,
                      headers=payment_headers(body), timeout=30)


def _stored_asset(db, event_id: str) -> list[str]:
    with db.cursor() as cur:
        cur.execute("SELECT asset FROM payment_events WHERE event_id = %s", (event_id,))
        return [row[0] for row in cur.fetchall()]


@pytest.mark.parametrize("asset", ["USD", "EUR", None])
def test_an_allowed_asset_is_accepted(server: RunningServer, db, asset: str | None) -> None:
    event_id = unique("asset-ok")
    answer = _send(server, event_id, asset)
    assert answer.status_code == 200, answer.text
    assert _stored_asset(db, event_id) == [asset or "USD"]


@pytest.mark.parametrize(("asset", "why"), [
    ("ETH_MAINNET:native", "chain asset"),
    ("ETH_MAINNET:0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", "chain asset"),
    ("GBP", "not one this gateway may credit"),
    ("usd", "not one this gateway may credit"),
])
def test_any_other_asset_is_a_400_with_the_reason_and_nothing_written(
        server: RunningServer, db, asset: str, why: str) -> None:
    event_id = unique("asset-refused")
    answer = _send(server, event_id, asset)
    assert answer.status_code == 400, answer.text
    error = answer.json()
    assert error["code"] == "unsupported_asset"
    assert why in error["reason"] and "allowed: EUR, USD" in error["reason"]
    assert _stored_asset(db, event_id) == []
    # The same event id with an allowed asset is then simply accepted: nothing of the
    # refused delivery was kept to conflict with it.
    assert _send(server, event_id, "EUR").status_code == 200
