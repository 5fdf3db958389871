"""The merchant API (docs/api.md) served for real (`paystream api`, a child process) against
the stack's Postgres, with the ledger applying events as its consumer does
(tests/support/ledger.py). Expected figures come from the events each test applies and
from the tables read directly as the owner, never from the API's own code."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from itertools import count

import httpx
import psycopg2.extensions
import pytest

from paystream.api import reads
from paystream.launch import free_port, paystream_argv
from paystream.schema.db import Connection, Cursor, connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from tests.support.api import ApiServer, api_server, bearer, new_key
from tests.support.consumers import record_of, store_events, wire_message
from tests.support.ids import unique
from tests.support.ingest import random_address
from tests.support.ledger import ledger_apply

_offsets = count(10_000)
ERROR_KEYS = {"status", "code", "reason", "trace_id"}


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with api_server({"PAYSTREAM_API_RATE_PER_SECOND": "1000",
                     "PAYSTREAM_API_RATE_BURST": "1000"}) as server:
        yield server


@pytest.fixture(scope="module")
def key() -> str:
    return new_key("read,write")[1]


def _user(db: Connection) -> str:
    user = unique("api-u")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    return user


def _apply(db: Connection, ledger: Connection, *events: PaymentEvent) -> None:
    with db.cursor() as cur:
        store_events(cur, events)
    result = ledger_apply(ledger, [record_of(wire_message(e), offset=next(_offsets))
                                   for e in events])
    assert not result.dead_letters, result.dead_letters


def _deposit(user: str, amount: str, asset: str = "USD") -> PaymentEvent:
    return PaymentEvent(unique("api-dep"), EventType.DEPOSIT, user, asset, Decimal(amount),
                        "payments")


def _error(resp: httpx.Response, status: int, code: str) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == ERROR_KEYS and body["status"] == "error", body
    assert body["code"] == code, body
    assert body["trace_id"] == resp.headers["x-request-id"]
    return body


# --- keys, scopes, limits --------------------------------------------------------------

def test_no_key_a_wrong_key_and_a_revoked_key_are_401_in_the_ingest_format(
        api: ApiServer, db: Connection) -> None:
    user = _user(db)
    path = f"{api.url}/v1/users/{user}/balances"
    _error(httpx.get(path), 401, "missing_api_key")
    _error(httpx.get(path, headers={"Authorization": "Basic abc"}), 401, "missing_api_key")
    _error(httpx.get(path, headers=bearer("psk_" + "x" * 43)), 401, "invalid_api_key")
    key_id, key = new_key("read")
    assert httpx.get(path, headers=bearer(key)).status_code == 200
    done = subprocess.run(paystream_argv("apikeys", "revoke", key_id), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "revoked" in done.stdout, done.stderr
    _error(httpx.get(path, headers=bearer(key)), 401, "invalid_api_key")
    # The caller's X-Request-ID is the trace id of the answer.
    resp = httpx.get(path, headers={"X-Request-ID": "merchant-req-1"})
    assert resp.json()["trace_id"] == "merchant-req-1"


def test_only_the_hash_of_a_key_is_stored_and_create_prints_it_once(db: Connection) -> None:
    done = subprocess.run(paystream_argv("apikeys", "create", "--name", "cli-test",
                                         "--scopes", "read,write"),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    key_id, key = out[0].split()[-1], out[3].split()[-1]
    assert out[3].startswith("key ") and "shown once" in out[4]
    with db.cursor() as cur:
        cur.execute("SELECT key_hash, scopes, revoked_at FROM api_keys WHERE key_id = %s",
                    (key_id,))
        key_hash, scopes, revoked = cur.fetchone()
        cur.execute("SELECT count(*) FROM api_keys WHERE position(%s in key_id || name ||"
                    " key_hash) > 0", (key[4:],))
        assert cur.fetchone()[0] == 0  # the key itself is stored nowhere
    assert key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert sorted(scopes) == ["read", "write"] and revoked is None
    listed = subprocess.run(paystream_argv("apikeys", "list"), capture_output=True,
                            text=True, timeout=60)
    assert key_id in listed.stdout and key not in listed.stdout
    bad = subprocess.run(paystream_argv("apikeys", "create", "--name", "x",
                                        "--scopes", "admin"),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "unknown scope 'admin'" in bad.stderr


def test_a_read_key_may_not_write_403(api: ApiServer) -> None:
    _, key = new_key("read")
    resp = httpx.post(f"{api.url}/v1/users", json={"user_id": unique("api-u")},
                      headers=bearer(key))
    _error(resp, 403, "insufficient_scope")


def test_a_key_over_its_rate_is_429_with_retry_after_and_others_are_not() -> None:
    with api_server({"PAYSTREAM_API_RATE_PER_SECOND": "0.2",
                     "PAYSTREAM_API_RATE_BURST": "2"}) as server:
        (_, first), (_, second) = new_key("read"), new_key("read")
        path = f"{server.url}/v1/users/nobody-{time.monotonic_ns()}/balances"
        answers = [httpx.get(path, headers=bearer(first)) for _ in range(3)]
        assert [a.status_code for a in answers] == [404, 404, 429]
        _error(answers[2], 429, "rate_limited")
        assert int(answers[2].headers["Retry-After"]) >= 1
        assert httpx.get(path, headers=bearer(second)).status_code == 404


def test_a_database_that_does_not_answer_is_503_with_retry_after(key: str) -> None:
    dead = f"postgresql://paystream_api@127.0.0.1:{free_port()}/paystream"
    with api_server({"PAYSTREAM_API_DATABASE_URL": dead}) as server:
        resp = httpx.get(f"{server.url}/v1/users/u/balances", headers=bearer(key))
        _error(resp, 503, "database_unavailable")
        assert resp.headers["Retry-After"] == "2"
        assert httpx.get(server.admin_url + "/readyz").status_code == 503


def test_docs_and_metrics_are_on_the_admin_port_and_v1_on_the_public_one(
        api: ApiServer, key: str) -> None:
    assert httpx.get(api.admin_url + "/docs").status_code == 200
    assert "/v1/withdrawals" in httpx.get(api.admin_url + "/openapi.json").json()["paths"]
    _error(httpx.get(api.url + "/docs"), 404, "http_404")
    _error(httpx.get(api.url + "/metrics"), 404, "http_404")
    _error(httpx.get(f"{api.admin_url}/v1/users/u/balances", headers=bearer(key)), 404,
           "http_404")
    httpx.get(f"{api.url}/v1/users/u/balances", headers=bearer(key))
    metrics = httpx.get(api.admin_url + "/metrics").text
    assert 'paystream_api_requests_total{route="/v1/users/{user_id}/balances"' in metrics


# --- users and deposit addresses ----------------------------------------------------------

def test_an_address_with_scan_from_block_asks_the_chain_scanner_for_its_past(
        api: ApiServer, key: str, db: Connection) -> None:
    user = unique("api-u")
    assert httpx.post(f"{api.url}/v1/users", json={"user_id": user},
                      headers=bearer(key)).status_code == 201
    path, address = f"{api.url}/v1/users/{user}/deposit-addresses", random_address()
    for bad in (-1, "12", 1.5):
        refused = httpx.post(path, json={"network": "ETH_MAINNET", "address": address,
                                         "scan_from_block": bad}, headers=bearer(key))
        assert refused.status_code in (400, 422), refused.text
    added = httpx.post(path, json={"network": "eth_mainnet", "address": address,
                                   "scan_from_block": 1234}, headers=bearer(key))
    assert added.status_code == 201, added.text
    assert added.json() == {"network": "ETH_MAINNET", "address": address.lower(),
                            "user_id": user, "created": True}
    with db.cursor() as cur:
        cur.execute("SELECT network, from_block, next_block, up_to_block, done_at"
                    " FROM chain_scan_backfills WHERE address = %s", (address.lower(),))
        assert cur.fetchall() == [("ETH_MAINNET", 1234, 1234, None, None)]


def test_users_and_addresses_are_created_once_and_an_address_credits_one_user(
        api: ApiServer, key: str, db: Connection) -> None:
    user, other = unique("api-u"), unique("api-u")
    for who in (user, other):
        assert httpx.post(f"{api.url}/v1/users", json={"user_id": who},
                          headers=bearer(key)).status_code == 201
    again = httpx.post(f"{api.url}/v1/users", json={"user_id": user}, headers=bearer(key))
    assert again.status_code == 200 and again.json() == {
        "user_id": user, "merchant_id": "m_default", "created": False}
    _error(httpx.post(f"{api.url}/v1/users", json={"user_id": "has space"},
                      headers=bearer(key)), 400, "invalid_request")
    address = "0x" + random_address()[2:].upper()  # stored lower-cased
    path = f"{api.url}/v1/users/{user}/deposit-addresses"
    added = httpx.post(path, json={"network": "eth_mainnet", "address": address},
                       headers=bearer(key))
    assert added.status_code == 201, added.text
    assert added.json() == {"network": "ETH_MAINNET", "address": address.lower(),
                            "user_id": user, "created": True}
    assert httpx.post(path, json={"network": "ETH_MAINNET", "address": address},
                      headers=bearer(key)).status_code == 200
    taken = httpx.post(f"{api.url}/v1/users/{other}/deposit-addresses",
                       json={"network": "ETH_MAINNET", "address": address}, headers=bearer(key))
    body = _error(taken, 409, "address_taken")
    assert user not in body["reason"]  # another user's id is not told
    _error(httpx.post(path, json={"network": "ETH_MAINNET", "address": "nope"},
                      headers=bearer(key)), 400, "invalid_address")
    _error(httpx.post(f"{api.url}/v1/users/{unique('ghost')}/deposit-addresses",
                      json={"network": "ETH_MAINNET", "address": address},
                      headers=bearer(key)), 404, "unknown_user")
    listed = httpx.get(path, headers=bearer(key)).json()
    assert [(a["network"], a["address"]) for a in listed["items"]] == [
        ("ETH_MAINNET", address.lower())]
    with db.cursor() as cur:
        cur.execute("SELECT user_id FROM deposit_addresses WHERE address = %s",
                    (address.lower(),))
        assert cur.fetchall() == [(user,)]


# --- balances, events, history ---------------------------------------------------------

def test_balances_now_and_at_a_moment_from_the_postings(
        api: ApiServer, key: str, db: Connection, ledger_db) -> None:
    user = _user(db)
    _apply(db, ledger_db.connection(), _deposit(user, "10.25"))
    time.sleep(0.05)
    between = datetime.now(UTC)
    time.sleep(0.05)
    _apply(db, ledger_db.connection(), _deposit(user, "4.75"), _deposit(user, "1", "EUR"))
    now = httpx.get(f"{api.url}/v1/users/{user}/balances", headers=bearer(key)).json()
    assert now == {"user_id": user, "at": None, "balances": [
        {"asset": "EUR", "available": "1", "pending": "0", "held": "0"},
        {"asset": "USD", "available": "15", "pending": "0", "held": "0"}]}
    then = httpx.get(f"{api.url}/v1/users/{user}/balances", headers=bearer(key),
                     params={"at": between.isoformat()}).json()
    assert then["balances"] == [{"asset": "USD", "available": "10.25", "pending": "0",
                                 "held": "0"}]
    # The same moment with an offset ISO 8601 allows and Postgres does not (+22:00).
    far_east = between.astimezone(timezone(timedelta(hours=22)))
    assert httpx.get(f"{api.url}/v1/users/{user}/balances", headers=bearer(key),
                     params={"at": far_east.isoformat()}).json()["balances"] == then["balances"]
    for wrong in ("yesterday", "0001-01-01T00:00:00+01:00"):  # the second is year 0 in UTC
        _error(httpx.get(f"{api.url}/v1/users/{user}/balances", headers=bearer(key),
                         params={"at": wrong}), 400, "invalid_request")
    _error(httpx.get(f"{api.url}/v1/users/{unique('ghost')}/balances",
                     headers=bearer(key)), 404, "unknown_user")


def test_an_event_shows_its_status_outcome_trace_and_entries(
        api: ApiServer, key: str, db: Connection, ledger_db) -> None:
    user = _user(db)
    deposit = _deposit(user, "7.5")
    too_much = PaymentEvent(unique("api-wd"), EventType.WITHDRAWAL, user, "USD",
                            Decimal("100"), "payments")
    _apply(db, ledger_db.connection(), deposit, too_much)
    got = httpx.get(f"{api.url}/v1/events/{deposit.event_id}", headers=bearer(key)).json()
    assert (got["status"], got["outcome"], got["amount"]) == ("applied", "applied", "7.5")
    assert got["trace_id"] == "trace-" + deposit.event_id  # as stored by store_events
    assert [(e["book"], e["delta"], e["user_id"]) for e in got["entries"]] == [
        ("available", "7.5", user)]
    refused = httpx.get(f"{api.url}/v1/events/{too_much.event_id}",
                        headers=bearer(key)).json()
    assert (refused["status"], refused["outcome"], refused["entries"]) == (
        "rejected", "insufficient_funds", [])
    _error(httpx.get(f"{api.url}/v1/events/{unique('nothing')}", headers=bearer(key)), 404,
           "unknown_event")


def test_reads_find_an_outcome_by_its_key_and_never_scan_processed_events(
        api: ApiServer, key: str, db: Connection, ledger_db) -> None:
    """processed_events grows by a row per event and has no event_id index: a read that
    looked an outcome up by event_id scanned all of it (91 ms at 936,000 rows) for every
    request. Postgres's own counters for this transaction say what was read.

    Sequential scans are priced out: on the few pages the table has here, once analyzed,
    the planner rightly prefers reading them all to the index (CI saw 3 seq scans when
    autovacuum had analyzed it first). Without an index on what a read filters by,
    Postgres still scans the table, and the counters show it."""
    user = _user(db)
    applied = _deposit(user, "3")
    waiting = _deposit(user, "4")  # stored, never applied: nothing to find
    _apply(db, ledger_db.connection(), applied)
    with db.cursor() as cur:
        store_events(cur, [waiting])
    requested = _withdraw(api, key, unique("idem"), {"user_id": user, "asset": "USD",
                                                     "amount": "1", "destination": "iban:X"})
    withdrawal_id = requested.json()["withdrawal_id"]
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            cur.execute("SET LOCAL enable_seqscan = off")
            got = (reads.event(cur, applied.event_id), reads.event(cur, waiting.event_id),
                   reads.withdrawal(cur, withdrawal_id))
            # Its partitions' counters (0047: a partition a day): each read probes each.
            cur.execute("SELECT sum(seq_scan), sum(coalesce(idx_scan, 0)),"
                        " sum(coalesce(idx_tup_fetch, 0)), count(*)"
                        " FROM pg_stat_xact_user_tables WHERE relid IN (SELECT inhrelid"
                        "  FROM pg_inherits WHERE inhparent = 'processed_events'::regclass)")
            seq_scans, index_scans, rows_fetched, partitions = cur.fetchone()
    finally:
        conn.close()
    assert [g["outcome"] if g else "missing" for g in got] == ["applied", None, None]
    assert (seq_scans, index_scans, rows_fetched) == (0, 3 * partitions, 1)


def test_history_pages_newest_first_and_stays_correct_while_entries_arrive(
        api: ApiServer, key: str, db: Connection, ledger_db) -> None:
    user = _user(db)
    deposits = [_deposit(user, f"{n + 1}") for n in range(7)]
    for deposit in deposits:  # one batch each: one transfer each, in this order
        _apply(db, ledger_db.connection(), deposit)
    path = f"{api.url}/v1/users/{user}/transactions"
    first = httpx.get(path, headers=bearer(key), params={"limit": 3}).json()
    assert [i["event_id"] for i in first["items"]] == [d.event_id for d in deposits[:3:-1]]
    late = _deposit(user, "100")  # arrives between two pages
    _apply(db, ledger_db.connection(), late)
    seen = list(first["items"])
    cursor = first["next_cursor"]
    while cursor is not None:
        page = httpx.get(path, headers=bearer(key), params={"limit": 3, "cursor": cursor})
        assert page.status_code == 200, page.text
        seen += page.json()["items"]
        cursor = page.json()["next_cursor"]
    assert [i["event_id"] for i in seen] == [d.event_id for d in reversed(deposits)]
    assert all(i["entries"] == [{"asset": "USD", "book": "available",
                                 "delta": d.to_wire()["amount"]}]
               for i, d in zip(seen, reversed(deposits), strict=True))
    fresh = httpx.get(path, headers=bearer(key), params={"limit": 1}).json()
    assert fresh["items"][0]["event_id"] == late.event_id
    _error(httpx.get(path, headers=bearer(key), params={"cursor": "-1"}), 400,
           "invalid_cursor")
    _error(httpx.get(path, headers=bearer(key), params={"limit": 501}), 400,
           "invalid_request")
    _error(httpx.get(f"{api.url}/v1/users/{unique('ghost')}/transactions",
                     headers=bearer(key)), 404, "unknown_user")
    empty = httpx.get(f"{api.url}/v1/users/{_user(db)}/transactions", headers=bearer(key))
    assert empty.json() == {"items": [], "next_cursor": None}


# --- withdrawals -------------------------------------------------------------------------

def _withdraw(api: ApiServer, key: str, idem: str | None, body: dict) -> httpx.Response:
    headers = {**bearer(key), **({"Idempotency-Key": idem} if idem else {})}
    return httpx.post(f"{api.url}/v1/withdrawals", json=body, headers=headers, timeout=10)


def test_a_withdrawal_is_written_once_per_idempotency_key(
        api: ApiServer, key: str, db: Connection) -> None:
    user = _user(db)
    body = {"user_id": user, "asset": "USD", "amount": "5.50", "destination": "iban:DE00"}
    idem = unique("idem")
    first = _withdraw(api, key, idem, body)
    assert first.status_code == 202, first.text
    withdrawal_id = first.json()["withdrawal_id"]
    assert withdrawal_id.startswith("api:withdrawal:")
    same = _withdraw(api, key, idem, {**body, "amount": "5.5"})  # the same amount
    assert (same.status_code, same.json()) == (202, first.json())
    _error(_withdraw(api, key, idem, {**body, "amount": "6"}), 409, "idempotency_key_reused")
    _error(_withdraw(api, key, None, body), 400, "missing_idempotency_key")
    _error(_withdraw(api, key, "has space", body), 400, "invalid_idempotency_key")
    # Another key's Idempotency-Key space is its own.
    other = _withdraw(api, new_key("write")[1], idem, body)
    assert other.status_code == 202 and other.json()["withdrawal_id"] != withdrawal_id
    with db.cursor() as cur:
        cur.execute("SELECT event_type, provider, amount, status, trace_id, payload"
                    " FROM payment_events JOIN event_status USING (event_id)"
                    " WHERE user_id = %s ORDER BY received_at", (user,))
        rows = cur.fetchall()
    assert len(rows) == 2
    event_type, provider, amount, status, trace_id, payload = rows[0]
    assert (event_type, provider, amount, status) == (
        "withdrawal_requested", "payments", Decimal("5.5"), "received")
    assert trace_id == first.json()["trace_id"] and payload["event_id"] == withdrawal_id
    got = httpx.get(f"{api.url}/v1/withdrawals/{withdrawal_id}", headers=bearer(key)).json()
    assert (got["status"], got["destination"], got["amount"]) == ("requested", "iban:DE00",
                                                                  "5.5")


def test_concurrent_requests_with_one_key_write_one_withdrawal(
        api: ApiServer, key: str, db: Connection) -> None:
    user = _user(db)
    body = {"user_id": user, "asset": "USD", "amount": "1", "destination": "acct-9"}
    idem = unique("idem")
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: _withdraw(api, key, idem, body), range(8)))
    assert {a.status_code for a in answers} == {202}
    assert len({a.json()["withdrawal_id"] for a in answers}) == 1
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM payment_events WHERE user_id = %s", (user,))
        assert cur.fetchone()[0] == 1


def test_a_withdrawal_request_that_cannot_be_one_is_refused_and_writes_nothing(
        api: ApiServer, key: str, db: Connection) -> None:
    user = _user(db)
    good = {"user_id": user, "asset": "USD", "amount": "1", "destination": "acct"}
    for change, code in (({"amount": "-1"}, "invalid_amount"),
                         ({"amount": "1e400"}, "invalid_amount"),
                         ({"asset": "ETH_MAINNET:native"}, "unsupported_asset"),
                         ({"destination": "has space"}, "invalid_destination"),
                         ({"user_id": unique("ghost")}, "unknown_user")):
        resp = _withdraw(api, key, unique("idem"), {**good, **change})
        _error(resp, 404 if code == "unknown_user" else 400, code)
    _error(_withdraw(api, key, unique("idem"), {**good, "amount": 1}), 400, "invalid_request")
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM payment_events WHERE user_id = %s", (user,))
        assert cur.fetchone()[0] == 0
    _error(httpx.get(f"{api.url}/v1/withdrawals/api:withdrawal:{'0' * 32}",
                     headers=bearer(key)), 404, "unknown_withdrawal")
    # A NUL cannot be in a query (psycopg2 refuses it): refused before, never a 500.
    _error(httpx.get(f"{api.url}/v1/withdrawals/a%00b", headers=bearer(key)), 400,
           "invalid_request")



# --- transactions: one snapshot per read, nothing left in the session ------------------

def test_a_read_is_one_repeatable_read_snapshot_and_leaves_no_session_state() -> None:
    from paystream.api.database import Database
    from paystream.api.settings import ApiSettings
    from paystream.edge.errors import DatabaseUnavailableError

    # One database thread, so every transaction below runs on one server connection.
    database = Database(ApiSettings.from_env(overrides={"db_pool_size": 1}))
    state = ("SELECT current_setting('transaction_isolation'),"
             " current_setting('transaction_read_only'), current_setting('statement_timeout'),"
             " current_user, txid_current_if_assigned() IS NULL, pg_backend_pid()")

    def several(cur: Cursor) -> tuple:
        cur.execute(state)
        settings = cur.fetchone()
        cur.execute("SELECT now()")
        first = cur.fetchone()[0]
        time.sleep(0.02)
        cur.execute("SELECT now()")
        return settings, first, cur.fetchone()[0]

    def one(cur: Cursor) -> tuple:
        cur.execute(state)
        return cur.fetchone()

    def a_second_statement(cur: Cursor) -> None:
        cur.execute("SELECT 1")
        cur.execute("SELECT 2")

    def written(cur: Cursor) -> tuple:
        cur.execute("SELECT current_setting('transaction_isolation'),"
                    " current_setting('statement_timeout'), pg_backend_pid()")
        return cur.fetchone()

    def session(conn: Connection) -> tuple:
        # What the next transaction, anyone's behind a pooler, finds on the connection.
        with conn.cursor() as cur:
            cur.execute("SELECT current_setting('statement_timeout'),"
                        " current_setting('transaction_isolation'),"
                        " (SELECT count(*) FROM pg_prepared_statements),"
                        " (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                        "  AND pid = pg_backend_pid()), pg_backend_pid()")
            return conn.autocommit, conn.get_transaction_status(), cur.fetchone()

    async def scenario() -> None:
        settings, first, later = await database.read(several)
        pid = settings[-1]
        assert settings == ("repeatable read", "on", "2s", "paystream_api", True, pid)
        assert later == first  # one transaction for the whole work
        # One statement: no BEGIN / COMMIT, the same transaction settings (an implicit
        # transaction of one message), and a second statement is refused.
        assert await database.read(one, one_statement=True) == settings
        with pytest.raises(RuntimeError, match="second statement"):
            await database.read(a_second_statement, one_statement=True)
        assert await database.write(written) == ("read committed", "2s", pid)
        assert await database._threads.run(session) == (
            True, psycopg2.extensions.TRANSACTION_STATUS_IDLE, ("0", "read committed", 0, 0, pid))

    try:
        asyncio.run(scenario())
    finally:
        database.close()
    # The statement timeout holds in both kinds of read (SET LOCAL in the transaction).
    quick = Database(ApiSettings.from_env(overrides={"db_statement_timeout_ms": 200}))
    try:
        for one_statement in (True, False):
            started = time.monotonic()
            with pytest.raises(DatabaseUnavailableError, match="QueryCanceled"):
                asyncio.run(quick.read(lambda cur: cur.execute("SELECT pg_sleep(3)"),
                                       one_statement=one_statement))
            assert time.monotonic() - started < 2
    finally:
        quick.close()
