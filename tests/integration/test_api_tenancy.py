"""Merchants (tenants) on the merchant API (docs/api.md#merchants): a hostile tenant walks
every /v1 operation of the OpenAPI document with its own key against the resources of
another merchant, and finds nothing and changes nothing.

Evidence independent of the API: the victim's own key sees each resource (so each exists
and the route works), the answers the attacker gets are compared with its answers for
ids that exist nowhere (the same status and code: no oracle), and the victim's rows are
read from the database as its owner before and after. A /v1 operation the walk has no
case for fails the test, so a new route cannot skip it.
"""

from __future__ import annotations

import csv
import io
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import count
from typing import Any

import httpx
import pytest

from paystream.consumers.connection import Database
from paystream.launch import paystream_argv
from paystream.notify import slots
from paystream.notify.intents import IntentType, new_intent, now_text
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from tests.support.api import UNLIMITED, ApiServer, api_server, bearer, new_key
from tests.support.consumers import record_of, store_events, wire_message
from tests.support.ids import unique
from tests.support.ingest import random_address
from tests.support.ledger import ledger_apply

_offsets = count(20_000)
NOBODY = "nobody-" + "0" * 8


def _cli(*args: str) -> str:
    done = subprocess.run(paystream_argv(*args), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with api_server({**UNLIMITED, "PAYSTREAM_API_KEY_USE_FLUSH_S": "0.5"}) as server:
        yield server


class Tenant:
    """A merchant made by `paystream merchants add`, its key, and its resources, made
    through the API with that key."""

    def __init__(self, api: ApiServer, name: str) -> None:
        self.merchant_id = _cli("merchants", "add", name).strip()
        self.key = new_key("read,write", name=name, merchant_id=self.merchant_id)[1]
        self.api = api
        self.user = unique("ten-u")
        self.address = random_address().lower()

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, self.api.url + path, headers={
            **bearer(self.key), **kwargs.pop("headers", {})}, timeout=30, **kwargs)

    def populate(self, db: Connection, ledger: Connection) -> None:
        assert self.call("POST", "/v1/users", json={"user_id": self.user}).status_code == 201
        assert self.call("POST", f"/v1/users/{self.user}/deposit-addresses", json={
            "network": "ETH_MAINNET", "address": self.address}).status_code == 201
        deposit = PaymentEvent(unique("ten-dep"), EventType.DEPOSIT, self.user, "USD",
                               Decimal("50"), "payments")
        with db.cursor() as cur:
            store_events(cur, [deposit])
        assert not ledger_apply(ledger, [record_of(wire_message(deposit),
                                                   offset=next(_offsets))]).dead_letters
        self.event_id = deposit.event_id
        made = self.call("POST", "/v1/withdrawals", headers={"Idempotency-Key": unique("k")},
                         json={"user_id": self.user, "asset": "USD", "amount": "5",
                               "destination": "bank-1"})
        assert made.status_code == 202, made.text
        self.withdrawal_id = made.json()["withdrawal_id"]
        invoice = self.call("POST", "/v1/invoices", headers={"Idempotency-Key": unique("k")},
                            json={"user_id": self.user, "asset": "USD", "amount": "20",
                                  "expires_in_s": 3600, "order_id": unique("order")})
        assert invoice.status_code == 201, invoice.text
        self.invoice_id = invoice.json()["invoice_id"]
        # An endpoint nothing listens on, with one delivery slot.
        endpoint = self.call("POST", "/v1/endpoints", headers={"Idempotency-Key": "e"},
                             json={"url": "http://127.0.0.1:9/hooks"})
        assert endpoint.status_code == 201, endpoint.text
        self.endpoint_id = endpoint.json()["endpoint_id"]
        sent = self.call("POST", f"/v1/endpoints/{self.endpoint_id}/test")
        assert sent.status_code == 202, sent.text
        self.delivery_id = sent.json()["delivery_id"]
        # Disabled: the stack's own sender leaves its slot as it is.
        off = self.call("PATCH", f"/v1/endpoints/{self.endpoint_id}", json={"enabled": False})
        assert off.status_code == 200 and off.json()["enabled"] is False


@pytest.fixture(scope="module")
def tenants(api: ApiServer) -> tuple[Tenant, Tenant]:
    db = connect(database_url("owner"))
    db.autocommit = True
    ledger = Database(application_name="paystream-test-ledger")
    try:
        victim, attacker = Tenant(api, unique("victim")), Tenant(api, unique("attacker"))
        victim.populate(db, ledger.connection())
        attacker.populate(db, ledger.connection())
    finally:
        db.close()
        ledger.close()
    return victim, attacker


# One case per /v1 operation: the request made against a target's ids (the victim's, or
# ids that exist nowhere), and what a foreign caller must get. A write's body names the
# target's user; a path names the target's resource.
Ids = dict[str, str]
Case = Callable[[Ids], dict[str, Any]]


def _write(body: Callable[[Ids], dict[str, Any]]) -> Case:
    return lambda ids: {"json": body(ids), "headers": {"Idempotency-Key": unique("k")}}


CASES: dict[tuple[str, str], Case] = {
    ("GET", "/v1/users/{user_id}/balances"): lambda ids: {},
    ("GET", "/v1/users/{user_id}/transactions"): lambda ids: {},
    ("GET", "/v1/users/{user_id}/deposit-addresses"): lambda ids: {},
    ("POST", "/v1/users/{user_id}/deposit-addresses"): _write(lambda ids: {
        "network": "ETH_MAINNET", "address": random_address()}),
    ("GET", "/v1/events/{event_id}"): lambda ids: {},
    ("GET", "/v1/withdrawals/{withdrawal_id}"): lambda ids: {},
    ("POST", "/v1/withdrawals"): _write(lambda ids: {
        "user_id": ids["user_id"], "asset": "USD", "amount": "1", "destination": "x"}),
    ("GET", "/v1/invoices/{invoice_id}"): lambda ids: {},
    ("POST", "/v1/invoices/{invoice_id}/cancel"): lambda ids: {},
    ("POST", "/v1/invoices"): _write(lambda ids: {
        "user_id": ids["user_id"], "asset": "USD", "amount": "3", "expires_in_s": 3600}),
    ("POST", "/v1/endpoints"): _write(lambda ids: {
        "url": "http://127.0.0.1:9/x", "merchant_id": ids["merchant_id"]}),
    ("GET", "/v1/endpoints/{endpoint_id}"): lambda ids: {},
    ("PATCH", "/v1/endpoints/{endpoint_id}"): lambda ids: {"json": {"description": "mine"}},
    ("DELETE", "/v1/endpoints/{endpoint_id}"): lambda ids: {},
    ("GET", "/v1/endpoints/{endpoint_id}/secret"): lambda ids: {},
    ("POST", "/v1/endpoints/{endpoint_id}/secret/rotate"): lambda ids: {},
    ("GET", "/v1/endpoints/{endpoint_id}/deliveries"): lambda ids: {},
    ("POST", "/v1/endpoints/{endpoint_id}/recover"): lambda ids: {
        "json": {"since": "2020-01-01T00:00:00Z"}},
    ("POST", "/v1/endpoints/{endpoint_id}/test"): lambda ids: {},
    ("POST", "/v1/deliveries/{delivery_id}/redeliver"): lambda ids: {},
}
# Operations whose answer to a foreign caller is not a 404, with the reason.
# Pages of the caller's own: checked for no foreign item.
LISTS = {("GET", "/v1/invoices"), ("GET", "/v1/endpoints"), ("GET", "/v1/exports/postings"),
         ("GET", "/v1/exports/transfers"), ("GET", "/v1/exports/invoices")}
CREATES = {("POST", "/v1/users")}  # ids are global: a taken one is 409 (docs/api.md)


def _operations(api: ApiServer) -> list[tuple[str, str]]:
    document = httpx.get(api.admin_url + "/openapi.json", timeout=10).json()
    return sorted((method.upper(), path) for path, item in document["paths"].items()
                  if path.startswith("/v1/") for method in item)


def _request(tenant: Tenant, method: str, template: str, ids: Ids) -> httpx.Response:
    path = template.format(**ids)
    return tenant.call(method, path, **CASES[(method, template)](ids))


def _victim_rows(user: str, endpoint_id: str) -> dict[str, Any]:
    """What the victim owns, read by the database's owner (no tenancy policy applies)."""
    conn = connect(database_url("owner"))
    try:
        with conn.cursor() as cur:
            found = {}
            for table, column in (("users", "user_id"), ("deposit_addresses", "user_id"),
                                  ("payment_events", "user_id"),
                                  ("api_withdrawals", "user_id"), ("balances", "user_id")):
                cur.execute(f"SELECT count(*) FROM {table} WHERE {column} = %s", (user,))
                found[table] = cur.fetchone()[0]
            cur.execute("SELECT array_agg(state || ':' || amount::text ORDER BY invoice_id)"
                        " FROM invoices WHERE user_id = %s", (user,))
            found["invoices"] = cur.fetchone()[0]
            cur.execute("SELECT array_agg(balance::text ORDER BY asset) FROM balances"
                        " WHERE user_id = %s", (user,))
            found["amounts"] = cur.fetchone()[0]
            cur.execute("SELECT url, description, secret, previous_secret, disabled_at,"
                        " deleted_at FROM notification_endpoints WHERE endpoint_id = %s",
                        (endpoint_id,))
            found["endpoint"] = cur.fetchone()
            cur.execute("SELECT array_agg(state || ':' || attempts ORDER BY intent_id)"
                        " FROM notification_deliveries WHERE endpoint_id = %s", (endpoint_id,))
            found["deliveries"] = cur.fetchone()[0]
            cur.execute("SELECT count(*) FROM endpoint_actions WHERE endpoint_id = %s",
                        (endpoint_id,))
            found["actions"] = cur.fetchone()[0]
        return found
    finally:
        conn.close()


def _answer(resp: httpx.Response, ids: Ids) -> tuple[int, str, str]:
    body = resp.json()
    message = body["reason"]
    for name, value in sorted(ids.items(), key=lambda item: -len(item[1])):
        message = message.replace(value, "{" + name + "}")
    return resp.status_code, body["code"], message


def test_a_hostile_tenant_walking_every_route_finds_nothing_and_changes_nothing(
        api: ApiServer, tenants: tuple[Tenant, Tenant]) -> None:
    victim, attacker = tenants
    operations = _operations(api)
    uncovered = [op for op in operations if op not in CASES and op not in LISTS | CREATES]
    assert not uncovered, f"no tenancy case for {uncovered}: add one to CASES"
    theirs: Ids = {"user_id": victim.user, "event_id": victim.event_id,
                   "withdrawal_id": victim.withdrawal_id, "invoice_id": victim.invoice_id,
                   "endpoint_id": victim.endpoint_id, "delivery_id": victim.delivery_id,
                   "merchant_id": victim.merchant_id}
    nowhere: Ids = {"user_id": NOBODY, "event_id": "evt-" + NOBODY,
                    "withdrawal_id": "api:withdrawal:" + "0" * 32,
                    "invoice_id": "inv_" + "0" * 32, "endpoint_id": "ep_" + "0" * 24,
                    "delivery_id": f"ntf_{'0' * 32}.ep_{'0' * 24}",
                    "merchant_id": "m_nosuch"}
    before = _victim_rows(victim.user, victim.endpoint_id)
    for method, template in operations:
        if (method, template) not in CASES:
            continue
        if method == "GET":  # the victim's own key sees it: it exists and the route works
            own = _request(victim, method, template, theirs)
            assert own.status_code == 200, (template, own.text)
        foreign = _request(attacker, method, template, theirs)
        missing = _request(attacker, method, template, nowhere)
        assert foreign.status_code == 404, (method, template, foreign.text)
        # Word for word the answer for ids that exist nowhere, but for the ids asked.
        assert _answer(foreign, theirs) == _answer(missing, nowhere), (method, template)
    # The list answers the attacker's own invoices only, filtered by the victim's user
    # or not.
    for query in ({}, {"user_id": victim.user}, {"order_id": "x"}):
        page = attacker.call("GET", "/v1/invoices", params=query)
        assert page.status_code == 200
        assert {i["user_id"] for i in page.json()["items"]} <= {attacker.user}, query
    assert victim.invoice_id in victim.call("GET", "/v1/invoices").text
    listed = attacker.call("GET", "/v1/endpoints").json()["items"]
    assert [e["endpoint_id"] for e in listed] == [attacker.endpoint_id]
    # A user id is unique across merchants: taken, and not created or moved.
    taken = attacker.call("POST", "/v1/users", json={"user_id": victim.user})
    assert taken.status_code == 409 and taken.json()["code"] == "user_id_taken", taken.text
    other = attacker.call("POST", "/v1/users", json={"user_id": unique("ten-u"),
                                                      "merchant_id": victim.merchant_id})
    assert other.status_code == 404 and other.json()["code"] == "unknown_merchant"
    # The victim's address cannot be claimed by the attacker's user either.
    claimed = attacker.call("POST", f"/v1/users/{attacker.user}/deposit-addresses",
                            json={"network": "ETH_MAINNET", "address": victim.address})
    assert claimed.status_code == 409 and claimed.json()["code"] == "address_taken"
    assert _victim_rows(victim.user, victim.endpoint_id) == before


def test_an_operator_key_sees_every_merchant_and_makes_users_for_one(
        api: ApiServer, tenants: tuple[Tenant, Tenant]) -> None:
    victim, attacker = tenants
    operator = new_key("read,write", name="operator", merchant_id=None)[1]
    for tenant in tenants:
        seen = httpx.get(f"{api.url}/v1/users/{tenant.user}/balances",
                         headers=bearer(operator))
        assert seen.status_code == 200 and seen.json()["balances"][0]["available"] == "50"
    user = unique("ten-u")
    made = httpx.post(f"{api.url}/v1/users", headers=bearer(operator),
                      json={"user_id": user, "merchant_id": victim.merchant_id})
    assert made.status_code == 201 and made.json()["merchant_id"] == victim.merchant_id
    assert victim.call("GET", f"/v1/users/{user}/deposit-addresses").status_code == 200
    assert attacker.call("GET", f"/v1/users/{user}/deposit-addresses").status_code == 404


def test_scopes_per_resource_expiry_and_last_use(api: ApiServer,
                                                 tenants: tuple[Tenant, Tenant]) -> None:
    victim, _ = tenants
    key_id, key = new_key("balances:read", name="narrow", merchant_id=victim.merchant_id)
    path = f"{api.url}/v1/users/{victim.user}"
    assert httpx.get(path + "/balances", headers=bearer(key)).status_code == 200
    for denied in (httpx.get(path + "/transactions", headers=bearer(key)),
                   httpx.get(f"{api.url}/v1/withdrawals/{victim.withdrawal_id}",
                             headers=bearer(key)),
                   httpx.post(f"{api.url}/v1/users", json={"user_id": unique("u")},
                              headers=bearer(key))):
        assert denied.status_code == 403, denied.text
        assert denied.json()["code"] == "insufficient_scope"
    conn = connect(database_url("owner"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            deadline = time.monotonic() + 10
            while True:  # written by the API's key-use thread (flush every 0.5 s here)
                cur.execute("SELECT last_used_at FROM api_keys WHERE key_id = %s", (key_id,))
                if cur.fetchone()[0] is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            cur.execute("SELECT last_used_at > now() - interval '1 minute' FROM api_keys"
                        " WHERE key_id = %s", (key_id,))
            assert cur.fetchone()[0] is True
            listed = _cli("apikeys", "list", "--merchant", victim.merchant_id)
            assert key_id in listed and "balances:read" in listed
            # Expired a moment ago: refused as a revoked key is.
            cur.execute("UPDATE api_keys SET expires_at = now() WHERE key_id = %s", (key_id,))
        expired = httpx.get(path + "/balances", headers=bearer(key))
        assert expired.status_code == 401 and expired.json()["code"] == "invalid_api_key"
    finally:
        conn.close()
    made = subprocess.run(paystream_argv("apikeys", "create", "--name", "x", "--merchant",
                                         "m_nosuch"), capture_output=True, text=True,
                          timeout=60)
    assert made.returncode == 1 and "no merchant 'm_nosuch'" in made.stderr


def test_a_merchants_endpoint_hears_of_its_own_users_only(
        db: Connection, tenants: tuple[Tenant, Tenant]) -> None:
    victim, attacker = tenants
    endpoints = {}
    with db.cursor() as cur:
        for owner in (victim.merchant_id, attacker.merchant_id, None):
            endpoint_id = "ep_" + uuid.uuid4().hex[:24]
            cur.execute("INSERT INTO notification_endpoints (endpoint_id, url, secret,"
                        " merchant_id) VALUES (%s, 'https://example.com/h', %s, %s)",
                        (endpoint_id, b"s" * 32, owner))
            endpoints[owner] = endpoint_id
        made = [new_intent(IntentType.DEPOSIT_CREDITED, unique("src"), tenant.user,
                           event_type="deposit", asset="USD", amount=Decimal(1),
                           created_at=now_text()) for tenant in tenants]
        slots.record(cur, [(intent, None) for intent in made])
        cur.execute("SELECT intent_id, endpoint_id FROM notification_deliveries"
                    " WHERE intent_id = ANY(%s)", ([i.id for i in made],))
        got = set(cur.fetchall())
        cur.execute("UPDATE notification_endpoints SET disabled_at = now()"
                    " WHERE endpoint_id = ANY(%s)", (list(endpoints.values()),))
    victims, attackers = made
    assert got == {(victims.id, endpoints[victim.merchant_id]), (victims.id, endpoints[None]),
                   (attackers.id, endpoints[attacker.merchant_id]),
                   (attackers.id, endpoints[None])}


def test_exports_hold_the_merchants_own_books_only(
        api: ApiServer, tenants: tuple[Tenant, Tenant]) -> None:
    victim, attacker = tenants
    now = datetime.now(UTC)
    window = {"from": (now - timedelta(hours=1)).isoformat(),
              "to": (now + timedelta(minutes=5)).isoformat()}
    for tenant, other in ((victim, attacker), (attacker, victim)):
        postings = _csv(tenant.call("GET", "/v1/exports/postings", params=window))
        assert postings[0] == ["transfer_id", "created_at", "event_id", "event_type",
                               "user_id", "book", "asset", "amount"]
        # The deposit of 50 to the tenant's user's available book, and nobody else's.
        assert {(r[2], r[4], r[5], r[7]) for r in postings[1:]} == {
            (tenant.event_id, tenant.user, "available", "50.000000000000000000")}
        transfers = _csv(tenant.call("GET", "/v1/exports/transfers", params=window))
        assert [r[2] for r in transfers[1:]] == [tenant.event_id]
        invoices = _csv(tenant.call("GET", "/v1/exports/invoices", params=window))
        assert [r[0] for r in invoices[1:]] == [tenant.invoice_id]
        assert other.user not in str((postings, transfers, invoices))
    too_long = {"from": "2026-01-01T00:00:00Z", "to": "2026-03-01T00:00:00Z"}
    refused = victim.call("GET", "/v1/exports/postings", params=too_long)
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_range"


def _csv(resp: httpx.Response) -> list[list[str]]:
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(resp.text)))
