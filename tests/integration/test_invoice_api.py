"""Invoices through the merchant API (docs/api.md), served for real (`paystream api`, a
child process) against the stack's Postgres, Debezium and Kafka. What is expected comes
from what each test itself assigned, loaded and sent (addresses, bodies, keys), read
back from the tables as the owner and from the notifications topic, never from the
API's own code. Each test works on a network and users of its own, so the pool of one
is never another test's."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from paystream.invoices import reads
from paystream.launch import paystream_argv
from paystream.notify.intents import IntentType, intent_id
from paystream.schema.db import Connection
from paystream.schema.events import NOTIFICATIONS_TOPIC
from tests.support.api import ApiServer, api_server, bearer, new_key
from tests.support.ids import unique
from tests.support.ingest import random_address
from tests.support.topics import TopicReader

ERROR_KEYS = {"status", "code", "reason", "trace_id"}
TOKEN = "0x" + "c0ffee" * 6 + "beef"


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with api_server({"PAYSTREAM_API_RATE_PER_SECOND": "1000",
                     "PAYSTREAM_API_RATE_BURST": "1000"}) as server:
        yield server


@pytest.fixture(scope="module")
def key() -> str:
    return new_key("read,write")[1]


def _network() -> str:
    return f"INVT_{uuid.uuid4().hex[:10].upper()}"


def _user(db: Connection, *addresses: tuple[str, str]) -> str:
    """A fresh user with these (network, address) deposit addresses."""
    user = unique("inv-u")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        for network, address in addresses:
            cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                        " VALUES (%s, %s, %s)", (network, address, user))
    return user


def _pool(network: str, *addresses: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(paystream_argv("addresses", "add", "--pool", network, *addresses),
                          capture_output=True, text=True, timeout=60)


def _post(api: ApiServer, key: str, body: dict[str, Any], idem: str | None = None
          ) -> httpx.Response:
    headers = {**bearer(key), **({"Idempotency-Key": idem} if idem is not None else {})}
    return httpx.post(f"{api.url}/v1/invoices", json=body, headers=headers, timeout=30)


def _new(api: ApiServer, key: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = _post(api, key, body, unique("idem"))
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def _body(user: str, asset: str = "USD", **extra: Any) -> dict[str, Any]:
    return {"user_id": user, "asset": asset, "amount": "10.5", "expires_in_s": 3600,
            **extra}


def _error(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == ERROR_KEYS and body["code"] == code, body
    return dict(body)


def _rows(db: Connection, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with db.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


# --- creation and addresses -----------------------------------------------------------

def test_a_chain_invoice_takes_the_users_spare_address_then_the_pools_and_a_gateway_none(
        api: ApiServer, key: str, db: Connection) -> None:
    network = _network()
    own, pooled, pooled2 = random_address(), random_address(), random_address()
    user = _user(db, (network, own))
    someone_elses = random_address()
    other = _user(db, (network, someone_elses))
    # The pool refuses a user's deposit address and an address pooled already.
    loaded = _pool(network, pooled, pooled2.upper().replace("0X", "0x"))
    assert loaded.returncode == 0, loaded.stderr + loaded.stdout
    again = _pool(network, pooled, someone_elses, "not-an-address")
    assert again.returncode == 1, again.stdout
    assert f"{pooled}: refused: already in the pool, free" in again.stdout
    assert f"{someone_elses}: refused: already the deposit address of user {other}" in (
        again.stdout)
    assert "not-an-address: refused: not an address" in again.stdout
    assert _rows(db, "SELECT address, taken_by FROM deposit_address_pool WHERE network = %s"
                     " ORDER BY added_at, address", network) in (
        [(pooled, None), (pooled2, None)], [(pooled2, None), (pooled, None)])

    first = _new(api, key, _body(user, f"{network.lower()}:native", order_id="o-1"))
    assert (first["network"], first["address"], first["asset"]) == (
        network, own, f"{network}:native")
    second = _new(api, key, _body(user, f"{network}:{TOKEN.upper().replace('0X', '0x')}"))
    third = _new(api, key, _body(user, f"{network}:native"))
    assert second["asset"] == f"{network}:{TOKEN}"
    assert {second["address"], third["address"]} == {pooled, pooled2}
    # Each pool address now credits this user, and the pool says which invoice took it.
    assert sorted(_rows(db, "SELECT address, user_id FROM deposit_addresses"
                            " WHERE network = %s AND user_id = %s", network, user)) == sorted(
        [(own, user), (pooled, user), (pooled2, user)])
    assert sorted(_rows(db, "SELECT address, taken_by FROM deposit_address_pool"
                            " WHERE network = %s AND taken_at IS NOT NULL", network)) == sorted(
        [(second["address"], second["invoice_id"]), (third["address"], third["invoice_id"])])
    # Nothing left: 409 naming the command that loads the pool; nothing written.
    none_left = _error(_post(api, key, _body(user, f"{network}:native"), unique("idem")),
                       409, "no_address_available")
    assert f"paystream addresses add --pool {network}" in none_left["reason"]
    gateway = _new(api, key, _body(user, "USD", metadata={"cart": [1, 2]},
                                   payment_tolerance_pct="2.5"))
    assert (gateway["network"], gateway["address"]) == (None, None)
    assert (gateway["metadata"], gateway["payment_tolerance_pct"]) == ({"cart": [1, 2]}, "2.5")
    assert (gateway["amount"], gateway["amount_paid"], gateway["amount_due"]) == (
        "10.5", "0", "10.5")
    assert _rows(db, "SELECT count(*) FROM invoices WHERE user_id = %s", user) == [(4,)]
    # The answer is what GET says, and the history's first line is its creation.
    got = httpx.get(f"{api.url}/v1/invoices/{first['invoice_id']}", headers=bearer(key))
    assert got.status_code == 200, got.text
    shown = got.json()
    assert {k: shown[k] for k in first} == first
    assert [(h["state"], h["cause"]) for h in shown["history"]] == [("new", "created")]
    assert shown["payments"] == [] and shown["state"] == "new"


def test_the_invoice_created_intent_goes_through_the_outbox_to_the_notifications_topic(
        api: ApiServer, key: str, db: Connection,
        topic_reader: Callable[[str], TopicReader]) -> None:
    reader = topic_reader(NOTIFICATIONS_TOPIC)
    user = _user(db)
    made = _new(api, key, _body(user, order_id="o-intent"))
    wanted = intent_id(made["invoice_id"], IntentType.INVOICE_CREATED)
    found = reader.read(1, 60, match=lambda m: wanted.encode() in (m.value() or b""))
    assert found, f"no {wanted} on {NOTIFICATIONS_TOPIC} within 60 s"
    value = json.loads(found[0].value())
    if isinstance(value, str):  # the router's payload as a JSON string
        value = json.loads(value)
    (intent,) = [i for i in value["intents"] if i["id"] == wanted]
    assert intent["type"] == "invoice.created"
    data = intent["data"]
    assert (data["invoice_id"], data["user_id"], data["amount"], data["order_id"],
            data["state"]) == (made["invoice_id"], user, "10.5", "o-intent", "new")
    assert found[0].key().decode() == user


# --- idempotency ----------------------------------------------------------------------

def test_an_invoice_is_created_once_per_idempotency_key(
        api: ApiServer, key: str, db: Connection) -> None:
    user = _user(db)
    body = _body(user, metadata={"a": 1, "b": [True]}, payment_tolerance_pct="1.50")
    idem = unique("idem")
    first = _post(api, key, body, idem)
    assert first.status_code == 201, first.text
    # The same request, spelled otherwise: the same invoice, 200.
    same = _post(api, key, {**body, "amount": "10.50", "payment_tolerance_pct": "1.5",
                            "metadata": {"b": [True], "a": 1}}, idem)
    assert (same.status_code, same.json()) == (200, first.json())
    for change in ({"amount": "11"}, {"expires_in_s": 3601}, {"order_id": "x"},
                   {"metadata": {}}):
        _error(_post(api, key, {**body, **change}, idem), 409, "idempotency_key_reused")
    _error(_post(api, key, body, None), 400, "missing_idempotency_key")
    _error(_post(api, key, body, "has space"), 400, "invalid_idempotency_key")
    # Another API key's Idempotency-Key space is its own.
    other = _post(api, new_key("write")[1], body, idem)
    assert other.status_code == 201 and other.json()["invoice_id"] != first.json()[
        "invoice_id"]
    assert _rows(db, "SELECT count(*) FROM invoices WHERE user_id = %s", user) == [(2,)]


def test_twenty_parallel_posts_with_one_key_make_one_invoice_and_take_one_address(
        api: ApiServer, key: str, db: Connection) -> None:
    network = _network()
    only = random_address()
    assert _pool(network, only).returncode == 0
    user = _user(db)
    body, idem = _body(user, f"{network}:native"), unique("idem")
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: _post(api, key, body, idem), range(20)))
    assert sorted(a.status_code for a in answers) == [200] * 19 + [201], [
        a.text for a in answers if a.status_code not in (200, 201)][:3]
    ids = {a.json()["invoice_id"] for a in answers}
    assert len(ids) == 1
    assert {a.json()["address"] for a in answers} == {only}
    assert _rows(db, "SELECT invoice_id FROM invoices WHERE idempotency_key = %s",
                 idem) == [(ids.pop(),)]
    assert _rows(db, "SELECT count(*) FROM invoice_history h JOIN invoices i USING"
                     " (invoice_id) WHERE i.user_id = %s", user) == [(1,)]


def test_concurrent_invoices_of_one_user_each_get_an_address_of_their_own(
        api: ApiServer, key: str, db: Connection) -> None:
    network = _network()
    own = [random_address() for _ in range(3)]
    pooled = [random_address() for _ in range(3)]
    assert _pool(network, *pooled).returncode == 0
    user = _user(db, *((network, a) for a in own))
    body = _body(user, f"{network}:native")
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: _post(api, key, body, unique("idem")), range(6)))
    assert [a.status_code for a in answers] == [201] * 6, [a.text for a in answers]
    assert sorted(a.json()["address"] for a in answers) == sorted(own + pooled)
    _error(_post(api, key, body, unique("idem")), 409, "no_address_available")
    assert _rows(db, "SELECT count(*) FROM invoices WHERE user_id = %s", user) == [(6,)]


# --- pages ----------------------------------------------------------------------------

def test_pages_by_each_filter_newest_first_and_a_cursor_walks_each_once(
        api: ApiServer, key: str, db: Connection) -> None:
    user, order = _user(db), unique("order")
    made = [_new(api, key, _body(user, order_id=order if i % 2 else None))
            for i in range(7)]
    ids = [m["invoice_id"] for m in made]
    # Statuses set as the ledger and the scheduler would (the test's own record).
    with db.cursor() as cur:
        cur.execute("UPDATE invoices SET state = 'settled', amount_paid = amount"
                    " WHERE invoice_id = ANY(%s)", (ids[:2],))
        cur.execute("UPDATE invoices SET state = 'expired', additional_status = 'paid_late'"
                    " WHERE invoice_id = %s", (ids[2],))

    def walk(limit: int, **query: str) -> list[str]:
        seen: list[str] = []
        cursor: str | None = None
        for _ in range(50):
            params = {**query, "limit": str(limit), **({"cursor": cursor} if cursor else {})}
            resp = httpx.get(f"{api.url}/v1/invoices", params=params, headers=bearer(key))
            assert resp.status_code == 200, resp.text
            page = resp.json()
            assert len(page["items"]) <= limit
            seen += [i["invoice_id"] for i in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return seen
        raise AssertionError("the walk did not end")

    newest_first = list(reversed(ids))
    assert walk(2, user_id=user) == newest_first
    assert walk(500, user_id=user) == newest_first
    assert walk(1, order_id=order) == [i for i in newest_first if ids.index(i) % 2]
    assert walk(3, user_id=user, status="settled") == [ids[1], ids[0]]
    assert walk(3, user_id=user, status="new") == newest_first[:4]
    assert walk(3, user_id=user, status="paid_late") == [ids[2]]
    assert walk(2, order_id=order, status="settled") == [ids[1]]
    # Without a user the page holds everyone's: ours are among them, each once, in order.
    everyone = walk(500, status="paid_late")
    assert ids[2] in everyone and len(everyone) == len(set(everyone))
    shown = httpx.get(f"{api.url}/v1/invoices", params={"user_id": user, "limit": "1"},
                      headers=bearer(key)).json()["items"][0]
    assert shown == {k: v for k, v in made[-1].items()}
    for bad, code in (({"cursor": "nope"}, "invalid_cursor"),
                      ({"status": "paid"}, "invalid_request"),
                      ({"limit": "0"}, "invalid_request"),
                      ({"order_id": "nul\x00"}, "invalid_order_id"),
                      ({"user_id": "a b"}, "invalid_request")):
        _error(httpx.get(f"{api.url}/v1/invoices", params=bad, headers=bearer(key)), 400,
               code)


def test_every_page_filter_is_served_by_an_index(db: Connection) -> None:
    """EXPLAIN of each page's statement with sequential and bitmap scans and sorts
    disabled (on a small table the planner rightly prefers them): a filter that no index
    serves in page order still plans a Seq Scan or a Sort, and its column is an Index
    Cond, not a Filter on another index's whole range."""
    # A cursor as a walk's first pages give: every invoice is older (an old one would let
    # the planner rightly prefer the (created_at, invoice_id) range for a near-empty page).
    after = (datetime.now(UTC) + timedelta(days=1), "inv_" + "0" * 32)
    for filters in ({}, {"user_id": "u"}, {"order_id": "o"}, {"status": "settled"},
                    {"status": "paid_late"}, {"user_id": "u", "status": "new"}):
        for cursor in (None, after):
            sql, params = reads.page_query(**filters, after=cursor, limit=50)
            with db.cursor() as cur:
                cur.execute("BEGIN; SET LOCAL enable_seqscan = off;"
                            " SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off")
                cur.execute("EXPLAIN " + sql, params)
                plan = "\n".join(r[0] for r in cur.fetchall())
                cur.execute("ROLLBACK")
            assert "Seq Scan" not in plan and "Sort" not in plan, (filters, plan)
            columns = {"state" if v in reads.STATES else "additional_status"
                       if k == "status" else k for k, v in filters.items()}
            conditions = " ".join(line for line in plan.splitlines() if "Index Cond" in line)
            if columns and not any(f"{c} = " in conditions for c in columns):
                # The newest-first index with the filter applied to its rows: the planner's
                # choice only when the filter keeps much of the table (a stack holding a
                # bench's 30,000 settled invoices), where a page of 50 reads a few
                # hundred rows; never for a filter that keeps a sliver.
                scan = next(line for line in plan.splitlines() if "Index Scan" in line)
                found = re.search(r"rows=(\d+)", scan)
                assert found is not None, plan
                with db.cursor() as cur:
                    cur.execute("SELECT reltuples FROM pg_class WHERE relname = 'invoices'")
                    total = float(cur.fetchone()[0])
                assert int(found.group(1)) >= 0.1 * total, (filters, total, plan)


# --- cancel ---------------------------------------------------------------------------

def test_an_open_unpaid_invoice_is_cancelled_and_anything_else_is_refused_with_its_reason(
        api: ApiServer, key: str, db: Connection,
        topic_reader: Callable[[str], TopicReader]) -> None:
    reader = topic_reader(NOTIFICATIONS_TOPIC)
    user = _user(db)
    open_, settled, expired, paid = (_new(api, key, _body(user)) for _ in range(4))
    with db.cursor() as cur:
        cur.execute("UPDATE invoices SET state = 'settled', amount_paid = amount"
                    " WHERE invoice_id = %s", (settled["invoice_id"],))
        cur.execute("UPDATE invoices SET state = 'expired' WHERE invoice_id = %s",
                    (expired["invoice_id"],))
        cur.execute("UPDATE invoices SET additional_status = 'paid_partial',"
                    " amount_paid = 1 WHERE invoice_id = %s", (paid["invoice_id"],))

    def cancel(invoice_id: str) -> httpx.Response:
        return httpx.post(f"{api.url}/v1/invoices/{invoice_id}/cancel", headers=bearer(key),
                          timeout=30)

    done = cancel(open_["invoice_id"])
    assert done.status_code == 200, done.text
    assert done.json()["state"] == "invalid"
    assert [(h["state"], h["cause"]) for h in done.json()["history"]] == [
        ("new", "created"), ("invalid", "cancelled")]
    assert _rows(db, "SELECT state FROM invoices WHERE invoice_id = %s",
                 open_["invoice_id"]) == [("invalid",)]
    assert "is invalid" in _error(cancel(open_["invoice_id"]), 409,
                                  "invoice_not_open")["reason"]
    assert "is settled" in _error(cancel(settled["invoice_id"]), 409,
                                  "invoice_not_open")["reason"]
    assert "is expired" in _error(cancel(expired["invoice_id"]), 409,
                                  "invoice_not_open")["reason"]
    assert "1 USD credited" in _error(cancel(paid["invoice_id"]), 409,
                                      "invoice_paid")["reason"]
    _error(cancel("inv_" + "f" * 32), 404, "unknown_invoice")
    _error(httpx.get(f"{api.url}/v1/invoices/inv_{'f' * 32}", headers=bearer(key)), 404,
           "unknown_invoice")
    # Only the cancel changed anything: one history line more, of the cancelled one.
    assert _rows(db, "SELECT count(*) FROM invoice_history h JOIN invoices i USING"
                     " (invoice_id) WHERE i.user_id = %s", user) == [(5,)]
    wanted = intent_id(open_["invoice_id"], IntentType.INVOICE_INVALID)
    assert reader.read(1, 60, match=lambda m: wanted.encode() in (m.value() or b"")), (
        f"no {wanted} on {NOTIFICATIONS_TOPIC}")


# --- refusals -------------------------------------------------------------------------

def test_an_invoice_request_that_cannot_be_one_is_refused_with_its_reason_and_writes_nothing(
        api: ApiServer, key: str, db: Connection) -> None:
    user = _user(db)
    good = _body(user)
    for change, status, code in (
            ({"amount": "-1"}, 400, "invalid_amount"),
            ({"amount": "1e400"}, 400, "invalid_amount"),
            ({"amount": "0.0000000000000000001"}, 400, "invalid_amount"),
            ({"amount": 10}, 400, "invalid_request"),
            ({"asset": "GBP"}, 400, "unsupported_asset"),
            ({"asset": "ETH_MAINNET:0x12"}, 400, "unsupported_asset"),
            ({"user_id": "has space"}, 400, "invalid_user_id"),
            ({"user_id": unique("ghost")}, 404, "unknown_user"),
            ({"expires_in_s": 59}, 400, "invalid_request"),
            ({"expires_in_s": 90 * 86400 + 1}, 400, "invalid_request"),
            ({"expires_in_s": 60.5}, 400, "invalid_request"),
            ({"order_id": "tab\tinside"}, 400, "invalid_order_id"),
            ({"order_id": "x" * 201}, 400, "invalid_request"),
            ({"metadata": {"k": "v" * 4100}}, 400, "invalid_metadata"),
            ({"metadata": {"k": "nul\x00"}}, 400, "invalid_metadata"),
            ({"metadata": [1]}, 400, "invalid_request"),
            ({"payment_tolerance_pct": "100"}, 400, "invalid_request"),
            ({"payment_tolerance_pct": 2.5}, 400, "invalid_request"),
            ({"surprise": 1}, 400, "invalid_request")):
        _error(_post(api, key, {**good, **change}, unique("idem")), status, code)
    # NaN is no JSON, but Python's parser takes it: refused, never a 500.
    raw = httpx.post(f"{api.url}/v1/invoices", headers={
        **bearer(key), "Idempotency-Key": unique("idem"), "Content-Type": "application/json"},
        content=json.dumps({**good, "metadata": {"x": float("nan")}}).encode())
    assert raw.status_code == 400, raw.text
    _error(httpx.post(f"{api.url}/v1/invoices", json=good,
                      headers={"Idempotency-Key": unique("idem")}), 401, "missing_api_key")
    _error(_post(api, new_key("read")[1], good, unique("idem")), 403, "insufficient_scope")
    assert _rows(db, "SELECT count(*) FROM invoices WHERE user_id = %s", user) == [(0,)]


def test_the_api_counts_invoice_requests_by_outcome(api: ApiServer, key: str,
                                                    db: Connection) -> None:
    user = _user(db)
    idem = unique("idem")
    assert _post(api, key, _body(user), idem).status_code == 201
    assert _post(api, key, _body(user), idem).status_code == 200
    assert _post(api, key, _body(user, amount="1"), idem).status_code == 409
    metrics = httpx.get(api.admin_url + "/metrics").text
    for outcome in ("created", "replayed", "conflict"):
        line = next(x for x in metrics.splitlines() if x.startswith(
            f'paystream_api_invoice_requests_total{{outcome="{outcome}"}}'))
        assert Decimal(line.split()[-1]) >= 1
