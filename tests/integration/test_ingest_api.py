"""The ingest API in process (starlette TestClient) against the real Postgres."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from paystream.ingest.app import create_app
from paystream.ingest.settings import IngestSettings
from tests.support.ids import unique
from tests.support.ingest import (
    ALCHEMY_KEY,
    PAYMENTS_SECRET_BYTES,
    USDC,
    alchemy_body,
    alchemy_headers,
    erc20_activity,
    eth_activity,
    ingest_env,
    known_user,
    nft_activity,
    payment_body,
    payment_headers,
    random_address,
)

SETTINGS = IngestSettings.from_env(ingest_env())  # as paystream_ingest
# A request to this origin arrives as if on the admin listener (scope["server"] port).
ADMIN = f"http://testserver:{SETTINGS.admin_port}"


def _client(**overrides: Any) -> TestClient:
    return TestClient(create_app(SETTINGS.replaced(**overrides)),
                      raise_server_exceptions=False)


@pytest.fixture
def client() -> Iterator[TestClient]:
    with _client() as c:
        yield c


def _count(db, sql: str, *params: Any) -> int:
    with db.cursor() as cur:
        cur.execute(sql, params)
        return int(cur.fetchone()[0])


def _events(db, user_id: str) -> list[tuple[str, str, Decimal, str]]:
    with db.cursor() as cur:
        cur.execute("SELECT event_id, asset, amount, trace_id FROM payment_events"
                    " WHERE user_id = %s ORDER BY amount", (user_id,))
        return cur.fetchall()


def _user_with_address(db, network: str = "ETH_MAINNET") -> tuple[str, str]:
    user, address = unique("user"), random_address()
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                    " VALUES (%s, %s, %s)", (network, address, user))
    return user, address


def _post_payment(client: TestClient, body: bytes, **header_kwargs: Any):
    return client.post("/webhooks/payments", content=body,
                       headers=payment_headers(body, **header_kwargs))


# --- the generic gateway -----------------------------------------------------------------

def test_a_signed_payment_is_accepted_once_then_duplicate(client: TestClient, db) -> None:
    user, event_id = known_user(), unique("ev")
    body = payment_body(event_id, user, "12.345")
    first = _post_payment(client, body)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "accepted"
    assert first.json()["events"] == [{"event_id": event_id, "outcome": "accepted"}]
    again = _post_payment(client, body)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    rows = _events(db, user)
    assert rows == [(event_id, "USD", Decimal("12.345"), first.json()["trace_id"])]


def test_same_event_id_with_other_content_is_a_409_and_writes_nothing(
        client: TestClient, db) -> None:
    user, event_id = known_user(), unique("ev")
    assert _post_payment(client, payment_body(event_id, user, "1")).status_code == 200
    conflict = _post_payment(client, payment_body(event_id, user, "1000"))
    assert conflict.status_code == 409
    assert conflict.json()["code"] == "conflicting_duplicate"
    assert conflict.json()["event_id"] == event_id and "different content" in \
        conflict.json()["reason"]
    assert [r[2] for r in _events(db, user)] == [Decimal(1)]
    metrics = client.get(ADMIN + "/metrics").text
    assert 'paystream_ingest_events_total{outcome="conflict",provider="payments"} 1.0' in metrics


@pytest.mark.parametrize(("body", "reason"), [
    (b"{not json", "malformed JSON"),
    (b"[1, 2]", "JSON object"),
    (json.dumps({"event_type": "deposit", "user_id": "u", "amount": "1"}).encode(),
     "event_id is required"),
    (payment_body("ev-x", "u", amount="-5"), "ASCII digits"),
    (json.dumps({"event_id": "e", "event_type": "deposit", "user_id": "u",
                 "amount": 5.5}).encode(), "JSON number"),
    (payment_body("ev-x", "u", event_type="bonus"), "event_type must be one of"),
    (payment_body("ev-x", "u", amount="1e-19"), "more than 18 decimal places"),
])
def test_invalid_payments_are_400_with_the_reason(client: TestClient, body: bytes,
                                                  reason: str) -> None:
    answer = _post_payment(client, body)
    assert answer.status_code == 400, answer.text
    assert reason in answer.json()["reason"]
    assert answer.json()["status"] == "error"


def test_signature_failures_are_401_before_the_body_is_parsed(client: TestClient, db) -> None:
    body = b"{this is not even json"
    headers = payment_headers(body, secret=b"an-attacker-secret-of-32-bytes!!!")
    answer = client.post("/webhooks/payments", content=body, headers=headers)
    assert answer.status_code == 401  # not 400: nothing was parsed
    assert answer.json()["code"] == "invalid_signature"


def test_missing_stale_future_and_reserialised_signatures_are_401(client: TestClient,
                                                                   db) -> None:
    user, event_id = known_user(), unique("ev")
    body = payment_body(event_id, user)
    missing = client.post("/webhooks/payments", content=body,
                          headers={"content-type": "application/json"})
    # 5 s past the 300 s tolerance, not 1: the whole seconds of the sender's clock and
    # the ingest's may tick apart between the two reads (+301 was once judged 300).
    stale = _post_payment(client, body, timestamp=int(time.time()) - 305)
    future = _post_payment(client, body, timestamp=int(time.time()) + 305)
    reserialised = json.dumps(json.loads(body), indent=2).encode()
    forged = client.post("/webhooks/payments", content=body,
                         headers=payment_headers(reserialised, msg_id="msg_1") | {
                             "webhook-id": "msg_1"})
    for answer in (missing, stale, future, forged):
        assert answer.status_code == 401, answer.text
    assert "missing header" in missing.json()["reason"]
    assert "from now" in stale.json()["reason"] and "from now" in future.json()["reason"]
    assert _events(db, user) == []


def test_a_rotated_secret_is_accepted(db) -> None:
    new_secret = b"the-next-payments-secret-32-bytes!!"
    both = " ".join("whsec_" + base64.b64encode(s).decode()
                    for s in (PAYMENTS_SECRET_BYTES, new_secret))
    rotated = IngestSettings.from_env(ingest_env(PAYMENTS_WEBHOOK_SECRET=both))
    with TestClient(create_app(rotated), raise_server_exceptions=False) as client:
        for secret in (PAYMENTS_SECRET_BYTES, new_secret):
            body = payment_body(unique("ev"), known_user())
            assert _post_payment(client, body, secret=secret).status_code == 200


def test_a_body_over_the_limit_is_413_even_without_content_length(db) -> None:
    with _client(max_body_bytes=2048) as client:
        body = payment_body(unique("ev"), known_user(), note="x" * 4096)
        declared = _post_payment(client, body)
        assert declared.status_code == 413 and declared.json()["code"] == "body_too_large"

        def chunks() -> Iterator[bytes]:  # chunked: the limit applies while reading
            for _ in range(64):
                yield b" " * 1024

        streamed = client.post("/webhooks/payments", content=chunks(),
                               headers=payment_headers(b""))
        assert streamed.status_code == 413


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_not_declared_as_json_is_415(client: TestClient, content_type: str | None
                                            ) -> None:
    body = payment_body(unique("ev"), known_user())
    headers = payment_headers(body)
    if content_type is None:
        del headers["content-type"]
    else:
        headers["content-type"] = content_type
    answer = client.post("/webhooks/payments", content=body, headers=headers)
    assert answer.status_code == 415 and "application/json" in answer.json()["reason"]


def test_json_with_a_charset_is_accepted(client: TestClient) -> None:
    body = payment_body(unique("ev"), known_user())
    headers = payment_headers(body) | {"content-type": "application/json; charset=utf-8"}
    assert client.post("/webhooks/payments", content=body, headers=headers).status_code == 200


def test_over_the_rate_limit_is_429_with_retry_after(db) -> None:
    with _client(rate_per_second=0.5, rate_burst=2) as client:
        answers = [_post_payment(client, payment_body(unique("ev"), known_user()))
                   for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert int(answers[2].headers["retry-after"]) >= 1
    assert answers[2].json()["code"] == "rate_limited"


def test_the_trace_id_comes_from_x_request_id_then_the_delivery_id(client: TestClient,
                                                                     db) -> None:
    user = known_user()
    body = payment_body(unique("ev"), user, "1")
    chosen = client.post("/webhooks/payments", content=body,
                         headers=payment_headers(body) | {"x-request-id": "req-123"})
    assert chosen.headers["x-request-id"] == "req-123" == chosen.json()["trace_id"]
    body = payment_body(unique("ev"), user, "2")
    by_delivery = _post_payment(client, body, msg_id="msg_trace_1")
    assert by_delivery.headers["x-request-id"] == "msg_trace_1"
    assert [r[3] for r in _events(db, user)] == ["req-123", "msg_trace_1"]
    generated = client.get("/healthz")
    assert len(generated.headers["x-request-id"]) == 32


def test_errors_are_json_with_a_reason_and_the_trace_id(client: TestClient) -> None:
    for answer in (client.get("/nowhere"), client.get("/webhooks/payments"),
                   client.post("/webhooks/alchemy", content=b"{}",
                               headers={"content-type": "application/json"})):
        assert answer.status_code in (401, 404, 405)
        body = answer.json()
        assert body["status"] == "error" and body["reason"] and body["trace_id"]
        assert answer.headers["x-request-id"] == body["trace_id"]


def test_health_readiness_metrics_and_docs_on_the_admin_port(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    for path in ("/readyz", "/metrics", "/docs", "/openapi.json"):
        assert client.get(path).status_code == 404, path  # not on the public port
    assert client.get(ADMIN + "/readyz").json() == {"status": "ready"}
    client.post("/webhooks/payments", content=b"{}", headers={"content-type": "text/plain"})
    metrics = client.get(ADMIN + "/metrics").text
    assert 'paystream_ingest_requests_total{endpoint="/webhooks/payments",status="415"}' \
        in metrics
    assert "paystream_ingest_request_duration_seconds_bucket" in metrics
    assert client.get(ADMIN + "/docs").status_code == 200
    paths = client.get(ADMIN + "/openapi.json").json()["paths"]
    assert {"/webhooks/alchemy", "/webhooks/payments", "/healthz", "/readyz",
            "/metrics"} <= set(paths)


# --- Alchemy -----------------------------------------------------------------------------

def _post_alchemy(client: TestClient, body: bytes):
    return client.post("/webhooks/alchemy", content=body, headers=alchemy_headers(body))


def test_an_alchemy_payload_with_several_activities(client: TestClient, db) -> None:
    user, address = _user_with_address(db)
    mixed_case = "0x" + address[2:].upper()
    usdc = erc20_activity(mixed_case, 1_500_000, log_index=4)          # 1.5 USDC
    eth = eth_activity(address, 2 * 10**18 + 1)                        # 2.000...001 ETH
    internal = eth_activity(address, 10**15, category="internal", trace="call_0_2")
    stranger = erc20_activity(random_address(), 7_000_000)             # not ours
    nft = nft_activity(address)
    body = alchemy_body([usdc, eth, internal, stranger, nft], delivery_id=unique("whevt"))
    answer = _post_alchemy(client, body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "accepted"
    assert answer.json()["notices_recorded"] == 2  # the stranger and the NFT
    assert _events(db, user) == [
        (f"ETH_MAINNET:{internal['hash']}:trace:call_0_2", "ETH_MAINNET:native",
         Decimal("0.001"), answer.json()["trace_id"]),
        (f"ETH_MAINNET:{usdc['hash']}:log:4", f"ETH_MAINNET:{USDC}", Decimal("1.5"),
         answer.json()["trace_id"]),
        (f"ETH_MAINNET:{eth['hash']}:external", "ETH_MAINNET:native",
         Decimal("2.000000000000000001"), answer.json()["trace_id"]),
    ]
    assert answer.json()["trace_id"] == json.loads(body)["id"]
    with db.cursor() as cur:
        cur.execute("SELECT kind, reason FROM ingest_notices WHERE event_id = ANY(%s)"
                    " ORDER BY kind", ([f"ETH_MAINNET:{stranger['hash']}:log:0",
                                        f"ETH_MAINNET:{nft['hash']}:log:3"],))
        assert cur.fetchall() == [("ignored", "unknown_address"), ("nft", "nft_transfer")]
        cur.execute("SELECT payload->'chain' FROM payment_events WHERE event_id = %s",
                    (f"ETH_MAINNET:{usdc['hash']}:log:4",))
        chain = cur.fetchone()[0]
    assert chain["recipient"] == address and chain["log_index"] == 4
    assert chain["raw_value"] == hex(1_500_000) and chain["removed"] is False

    # A redelivery (same bytes) and the same transfers in another payload write nothing.
    counts = (_count(db, "SELECT count(*) FROM payment_events WHERE user_id = %s", user),
              _count(db, "SELECT count(*) FROM ingest_notices"))
    for redelivery in (body, alchemy_body([usdc, eth, internal, stranger, nft])):
        again = _post_alchemy(client, redelivery)
        assert again.status_code == 200 and again.json()["status"] == "duplicate"
        assert again.json()["notices_known"] == 2
    assert counts == (_count(db, "SELECT count(*) FROM payment_events WHERE user_id = %s",
                             user), _count(db, "SELECT count(*) FROM ingest_notices"))


def test_a_conflict_rolls_back_the_whole_payload(client: TestClient, db) -> None:
    user, address = _user_with_address(db)
    usdc = erc20_activity(address, 1_000_000)
    assert _post_alchemy(client, alchemy_body([usdc])).status_code == 200
    tampered = json.loads(json.dumps(usdc))
    tampered["rawContract"]["rawValue"] = hex(9_000_000)  # same log, other amount
    fresh = eth_activity(address, 10**18)
    answer = _post_alchemy(client, alchemy_body([fresh, tampered]))
    assert answer.status_code == 409, answer.text
    assert answer.json()["event_id"] == f"ETH_MAINNET:{usdc['hash']}:log:0"
    assert [r[2] for r in _events(db, user)] == [Decimal(1)]  # `fresh` was not written


def test_the_same_transfer_in_a_new_block_is_a_reorg_notice(client: TestClient, db) -> None:
    user, address = _user_with_address(db)
    usdc = erc20_activity(address, 3_000_000, block=100, block_hash="0x" + "1" * 64)
    assert _post_alchemy(client, alchemy_body([usdc])).json()["status"] == "accepted"
    moved = erc20_activity(address, 3_000_000, tx_hash=usdc["hash"], block=101,
                           block_hash="0x" + "2" * 64, sender=usdc["fromAddress"])
    removed = erc20_activity(address, 3_000_000, tx_hash=usdc["hash"], block=100,
                             block_hash="0x" + "1" * 64, sender=usdc["fromAddress"],
                             removed=True)
    for activity in (moved, removed):
        answer = _post_alchemy(client, alchemy_body([activity]))
        assert answer.status_code == 200 and answer.json()["notices_recorded"] == 1
    assert len(_events(db, user)) == 1  # never credited twice
    with db.cursor() as cur:
        cur.execute("SELECT reason FROM ingest_notices WHERE event_id = %s ORDER BY reason",
                    (f"ETH_MAINNET:{usdc['hash']}:log:0",))
        assert [r[0] for r in cur.fetchall()] == ["block_changed", "log_removed"]


def test_capacity_errors_are_acknowledged_and_recorded(client: TestClient, db) -> None:
    delivery_id = unique("whevt")
    body = alchemy_body([], delivery_id=delivery_id, error="capacity limit exceeded")
    answer = _post_alchemy(client, body)
    assert answer.status_code == 200 and answer.json()["notices_recorded"] == 1
    assert _count(db, "SELECT count(*) FROM ingest_notices WHERE delivery_id = %s"
                      " AND kind = 'capacity_error'", delivery_id) == 1
    assert _post_alchemy(client, body).json()["status"] == "duplicate"


def test_alchemy_signatures_are_checked_on_the_raw_bytes(client: TestClient, db) -> None:
    user, address = _user_with_address(db)
    body = alchemy_body([erc20_activity(address, 1_000_000)])
    reserialised = json.dumps(json.loads(body), separators=(",", ":")).encode()
    wrong_key = alchemy_headers(body, key=ALCHEMY_KEY + "-other")
    for headers in ({"content-type": "application/json"}, wrong_key,
                    alchemy_headers(reserialised)):
        answer = client.post("/webhooks/alchemy", content=body, headers=headers)
        assert answer.status_code == 401, answer.text
    assert _events(db, user) == []
