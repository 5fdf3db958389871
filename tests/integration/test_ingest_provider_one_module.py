"""A provider is one module: a second Standard Webhooks gateway declared in a test alone
(tests/support/providers/second_gateway.py) is found as the product's providers are
(ingest/registry.py, `also`), served at its path with its own secret and parser,
described on /docs, refused at start without its secret, and changes nothing for the
product's providers. The app in process (starlette TestClient), the real Postgres."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from paystream.ingest.app import create_app
from paystream.ingest.settings import IngestSettings, SettingsError
from paystream.schema.events import PAYMENTS_TOPIC
from tests.support.ids import unique
from tests.support.ingest import (
    PAYMENTS_SECRET_BYTES,
    alchemy_body,
    alchemy_headers,
    ingest_env,
    known_user,
    payment_body,
    payment_headers,
)
from tests.support.providers import second_gateway as gateway
from tests.support.topics import TopicReader, headers_of

ALSO = ("tests.support.providers",)
SECRET_BYTES = b"the-second-gateway's-own-secret, 32+ bytes"
ENV = ingest_env(GATEWAY_TWO_WEBHOOK_SECRET="whsec_" + base64.b64encode(SECRET_BYTES).decode())


@pytest.fixture(scope="module")
def settings() -> IngestSettings:
    return IngestSettings.from_env(ENV, also=ALSO)


@pytest.fixture
def client(settings: IngestSettings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _body(event_id: str, customer: str, amount: str = "25.5", **extra: Any) -> bytes:
    return json.dumps({"id": event_id, "type": "deposit", "customer": customer,
                       "amount": amount, **extra}).encode()


def _post(client: TestClient, body: bytes, secret: bytes = SECRET_BYTES) -> Any:
    return client.post(gateway.PATH, content=body, headers=payment_headers(body, secret=secret))


def _stored(db: Any, user: str) -> list[tuple[Any, ...]]:
    with db.cursor() as cur:
        cur.execute("SELECT event_id, provider, asset, amount FROM payment_events"
                    " WHERE user_id = %s ORDER BY event_id", (user,))
        return cur.fetchall()


def test_it_is_found_beside_the_products_in_order(settings: IngestSettings) -> None:
    assert [(s.name, s.provider.path) for s in settings.providers] == [
        ("alchemy", "/webhooks/alchemy"), ("gateway_two", gateway.PATH),
        ("payments", "/webhooks/payments")]
    # The product alone does not serve it, and needs none of its settings.
    product = IngestSettings.from_env(ingest_env())
    assert [s.name for s in product.providers] == ["alchemy", "payments"]


def test_a_signed_delivery_is_stored_once_with_its_outbox_row(
        client: TestClient, db: Any, topic_reader: Callable[[str], TopicReader]) -> None:
    messages = topic_reader(PAYMENTS_TOPIC)
    user, event_id = known_user(), unique("gw2")
    body = _body(event_id, user, currency="EUR")
    first = _post(client, body)
    assert first.status_code == 200, first.text
    stored_id = gateway.ID_PREFIX + event_id
    assert first.json()["events"] == [{"event_id": stored_id, "outcome": "accepted"}]
    again = _post(client, body)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    assert _stored(db, user) == [(stored_id, "gateway_two", "EUR", Decimal("25.5"))]
    # Its outbox row (deleted in its transaction, as every one is) reached the topic,
    # once: the duplicate wrote none.
    sent = messages.read(2, timeout=8, match=lambda m: headers_of(m).get("event_id")
                         == stored_id)
    assert [json.loads(m.value())["provider"] for m in sent] == ["gateway_two"]
    metrics = client.get(f"http://testserver:{client.app.api.state.settings.admin_port}"
                         "/metrics").text
    assert 'paystream_ingest_events_total{outcome="accepted",provider="gateway_two"} 1.0' \
        in metrics
    assert f'endpoint="{gateway.PATH}",status="200"' in metrics


def test_a_wrong_signature_is_401_and_writes_nothing(client: TestClient, db: Any) -> None:
    user = known_user()
    body = _body(unique("gw2"), user)
    # Signed with the first gateway's secret: each provider checks its own.
    answer = _post(client, body, secret=PAYMENTS_SECRET_BYTES)
    assert answer.status_code == 401, answer.text
    assert answer.json()["code"] == "invalid_signature"
    unsigned = client.post(gateway.PATH, content=body,
                           headers={"content-type": "application/json"})
    assert unsigned.status_code == 401
    assert _stored(db, user) == []


@pytest.mark.parametrize(("change", "reason"), [
    ({"customer": None}, "customer is required"),
    ({"amount": "-3"}, "amount"),
    ({"currency": "GBP"}, "'GBP' is not one this gateway may credit"),
], ids=["its-own-field", "a-value", "an-asset-of-its-settings"])
def test_a_bad_body_is_400_naming_the_field(client: TestClient, db: Any,
                                            change: dict[str, Any], reason: str) -> None:
    user = known_user()
    fields = {"id": unique("gw2"), "type": "deposit", "customer": user, "amount": "1",
              **change}
    answer = _post(client, json.dumps(fields).encode())
    assert answer.status_code == 400, answer.text
    assert reason in answer.json()["reason"]
    assert _stored(db, user) == []


@pytest.mark.parametrize(("secret", "message"), [
    (None, "GATEWAY_TWO_WEBHOOK_SECRET is required"),
    ("whsec_" + base64.b64encode(b"s" * 16).decode(),
     "GATEWAY_TWO_WEBHOOK_SECRET is 16 bytes after decoding; at least 32"),
    ("whsec_not*base64", "GATEWAY_TWO_WEBHOOK_SECRET must be whsec_ followed by base64"),
], ids=["missing", "weak", "not-base64"])
def test_without_a_strong_secret_it_refuses_to_start(secret: str | None,
                                                     message: str) -> None:
    """The SettingsError `paystream ingest` exits 2 on, as it does for the product's
    providers (tests/integration/test_ingest_server.py)."""
    env = {k: v for k, v in ENV.items() if k != "GATEWAY_TWO_WEBHOOK_SECRET"}
    if secret is not None:
        env["GATEWAY_TWO_WEBHOOK_SECRET"] = secret
    with pytest.raises(SettingsError, match=message):
        IngestSettings.from_env(env, also=ALSO)


def test_docs_describe_it(client: TestClient, settings: IngestSettings) -> None:
    admin = f"http://testserver:{settings.admin_port}"
    assert client.get(admin + "/docs").status_code == 200
    paths = client.get(admin + "/openapi.json").json()["paths"]
    assert {"/webhooks/alchemy", "/webhooks/payments", gateway.PATH} <= set(paths)
    post = paths[gateway.PATH]["post"]
    assert post["summary"] == gateway.PROVIDER.summary
    assert post["requestBody"]["content"]["application/json"]["schema"]["required"] == [
        "id", "type", "customer", "amount"]
    assert "webhook-signature" in {p["name"] for p in post["parameters"]}
    assert {"200", "400", "401"} <= set(post["responses"])
    product = TestClient(create_app(IngestSettings.from_env(ingest_env())))
    with product:
        assert gateway.PATH not in product.get(admin + "/openapi.json").json()["paths"]
        assert product.post(gateway.PATH, content=b"{}").status_code == 404


def test_the_products_providers_are_unaffected(client: TestClient, db: Any) -> None:
    user = known_user()
    payment = payment_body(unique("ev"), user, "3")
    answer = client.post("/webhooks/payments", content=payment,
                         headers=payment_headers(payment))
    assert answer.status_code == 200 and answer.json()["status"] == "accepted"
    # The first gateway's secret is its own: the second's does not sign for it.
    forged = client.post("/webhooks/payments", content=payment,
                         headers=payment_headers(payment, secret=SECRET_BYTES))
    assert forged.status_code == 401
    alchemy = alchemy_body([])
    assert client.post("/webhooks/alchemy", content=alchemy,
                       headers=alchemy_headers(alchemy)).status_code == 200
    assert [r[1] for r in _stored(db, user)] == ["payments"]
