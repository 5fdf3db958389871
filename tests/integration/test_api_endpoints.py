"""A merchant's own webhook endpoints over the API (docs/api.md#endpoints), against a
real receiver (paystream/chaos/receiver.py verifies every signature with the secret the
API gave) and a real sender (`paystream notify deliver`). Evidence independent of the
API: what the receiver got and verified, and the endpoint_actions rows read as the
database's owner."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from paystream.chaos.receiver import Receiver, receiver
from paystream.launch import free_port
from paystream.schema.db import Connection
from tests.integration.test_api_tenancy import _cli
from tests.support.api import UNLIMITED, ApiServer, api_server, bearer, new_key
from tests.support.consumers import ConsumerProcess
from tests.support.ids import unique
from tests.support.notify import FAST, start_sender
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with api_server(UNLIMITED) as server:
        yield server


@pytest.fixture(scope="module")
def hooks() -> Iterator[Receiver]:
    with receiver(free_port()) as server:
        yield server


@pytest.fixture
def sender(tmp_path: Path) -> Iterator[ConsumerProcess]:
    proc = start_sender(tmp_path, FAST)
    yield proc
    proc.terminate()


@pytest.fixture
def impatient_sender(tmp_path: Path) -> Iterator[ConsumerProcess]:
    """One that disables an endpoint failing for 1.5 s (its retries span 1.8 s)."""
    proc = start_sender(tmp_path, {**FAST, "PAYSTREAM_NOTIFY_DISABLE_AFTER_S": "1.5"})
    yield proc
    proc.terminate()


class Merchant:
    def __init__(self, api: ApiServer) -> None:
        self.merchant_id = _cli("merchants", "add", unique("ep-merchant")).strip()
        self.key = new_key("endpoints:read,endpoints:write", name="ep",
                           merchant_id=self.merchant_id)[1]
        self.api = api

    def call(self, method: str, path: str, idem: str | None = None,
             **kwargs: Any) -> httpx.Response:
        headers = {**bearer(self.key), **({"Idempotency-Key": idem} if idem else {})}
        return httpx.request(method, self.api.url + path, headers=headers, timeout=30,
                             **kwargs)

    def create(self, hooks: Receiver, path: str, made: list[str], **body: Any) -> dict:
        answer = self.call("POST", "/v1/endpoints", unique("k"),
                           json={"url": hooks.url(path), **body})
        assert answer.status_code == 201, answer.text
        hooks.secrets[path] = answer.json()["secret"]
        made.append(answer.json()["endpoint_id"])
        return answer.json()


def _actions(db: Connection, endpoint_id: str) -> list[tuple[str, str]]:
    with db.cursor() as cur:
        cur.execute("SELECT actor, action FROM endpoint_actions WHERE endpoint_id = %s"
                    " ORDER BY id", (endpoint_id,))
        return cur.fetchall()


def test_create_is_idempotent_checked_and_guarded(api: ApiServer, hooks: Receiver,
                                                  endpoints: list[str]) -> None:
    merchant = Merchant(api)
    body = {"url": hooks.url("/ok/idem"), "event_types": ["deposit.*"],
            "description": "orders service"}
    assert merchant.call("POST", "/v1/endpoints", json=body).status_code == 400
    first = merchant.call("POST", "/v1/endpoints", "k1", json=body)
    again = merchant.call("POST", "/v1/endpoints", "k1", json=body)
    assert (first.status_code, again.status_code) == (201, 200), (first.text, again.text)
    assert again.json() == first.json() and first.json()["secret"].startswith("whsec_")
    endpoints.append(first.json()["endpoint_id"])
    other = merchant.call("POST", "/v1/endpoints", "k1", json={**body, "description": "x"})
    assert other.status_code == 409 and other.json()["code"] == "idempotency_key_reused"
    for url, code in (("ftp://example.com/h", "invalid_url"),
                      ("http://169.254.169.254/latest/meta-data", "invalid_url"),
                      ("http://[::ffff:10.0.0.1]/h", "invalid_url"),
                      ("https://user:pw@example.com/h", "invalid_url")):
        refused = merchant.call("POST", "/v1/endpoints", unique("k"), json={"url": url})
        assert refused.status_code == 400 and refused.json()["code"] == code, (url, refused.text)
    bad_types = merchant.call("POST", "/v1/endpoints", unique("k"),
                              json={"url": hooks.url("/ok/x"), "event_types": ["nope.*"]})
    assert bad_types.status_code == 400 and bad_types.json()["code"] == "invalid_event_types"
    listed = merchant.call("GET", "/v1/endpoints").json()["items"]
    assert [e["endpoint_id"] for e in listed] == [first.json()["endpoint_id"]]
    assert listed[0]["description"] == "orders service" and listed[0]["enabled"] is True


def test_a_merchant_tests_rotates_reads_the_log_recovers_and_deletes(
        api: ApiServer, hooks: Receiver, sender: ConsumerProcess, db: Connection,
        endpoints: list[str]) -> None:
    merchant = Merchant(api)
    path = f"/ok/{unique('ep')}"
    made = merchant.create(hooks, path, endpoints, event_types=["deposit.*"])
    endpoint_id = made["endpoint_id"]
    # A test: signed with the secret the API gave (the receiver verifies it).
    sent = merchant.call("POST", f"/v1/endpoints/{endpoint_id}/test", "t1")
    assert sent.status_code == 202, sent.text
    assert merchant.call("POST", f"/v1/endpoints/{endpoint_id}/test", "t1").json() == \
        sent.json()  # once per Idempotency-Key
    wait_until(lambda: sent.json()["intent_id"] in hooks.ids(path), 30, "the test delivered")
    assert not hooks.refused(), hooks.refused()
    assert hooks.bodies(path)[-1]["type"] == "endpoint.test"
    # The receiver hears the request before the notifier records the attempt.
    wait_until(lambda: merchant.call("GET", f"/v1/endpoints/{endpoint_id}/deliveries")
               .json()["items"], 10, "the attempt recorded")
    log = merchant.call("GET", f"/v1/endpoints/{endpoint_id}/deliveries").json()
    assert log["items"][0]["status_code"] == 200 and log["items"][0]["response_head"] == "ok"
    assert log["items"][0]["delivery_id"] == sent.json()["delivery_id"]
    # Rotation: the new secret signs (the receiver knows only it now).
    rotated = merchant.call("POST", f"/v1/endpoints/{endpoint_id}/secret/rotate").json()
    assert rotated["secret"] != made["secret"] and rotated["previous_secret_until"]
    assert merchant.call("GET", f"/v1/endpoints/{endpoint_id}/secret").json()["secret"] \
        == rotated["secret"]
    hooks.secrets[path] = rotated["secret"]
    second = merchant.call("POST", f"/v1/endpoints/{endpoint_id}/test").json()
    wait_until(lambda: second["intent_id"] in hooks.ids(path), 30, "signed with the new key")
    assert not hooks.refused(), hooks.refused()
    # Failing: pointed at a path that answers 500, the test fails for good (6 retries).
    failing = f"/fail/{unique('ep')}"
    hooks.secrets[failing] = rotated["secret"]
    changed = merchant.call("PATCH", f"/v1/endpoints/{endpoint_id}",
                            json={"url": hooks.url(failing), "description": "now failing"})
    assert changed.status_code == 200 and changed.json()["url"] == hooks.url(failing)
    before = datetime.now(UTC) - timedelta(seconds=5)
    third = merchant.call("POST", f"/v1/endpoints/{endpoint_id}/test").json()
    wait_until(lambda: _state(db, third["delivery_id"]) == "failed", 60, "given up")
    back = merchant.call("PATCH", f"/v1/endpoints/{endpoint_id}", json={"url": hooks.url(path)})
    assert back.status_code == 200 and back.json()["failing_since"] is not None
    page = merchant.call("GET", f"/v1/endpoints/{endpoint_id}/deliveries",
                         params={"limit": 2}).json()
    assert [i["status_code"] for i in page["items"]] == [500, 500]
    assert page["items"][0]["response_head"] == "not now" and page["next_cursor"]
    rest = merchant.call("GET", f"/v1/endpoints/{endpoint_id}/deliveries",
                         params={"cursor": page["next_cursor"], "limit": 100}).json()
    assert all(i["attempt_id"] < page["items"][-1]["attempt_id"] for i in rest["items"])
    recovered = merchant.call("POST", f"/v1/endpoints/{endpoint_id}/recover",
                              json={"since": before.isoformat()})
    assert recovered.status_code == 200 and recovered.json()["redelivering"] == 1
    wait_until(lambda: third["intent_id"] in hooks.ids(path), 30, "recovered")
    # Redeliver one delivered already: sent again, under the same webhook-id.
    again = merchant.call("POST", f"/v1/deliveries/{sent.json()['delivery_id']}/redeliver")
    assert again.status_code == 200 and again.json()["was"] == "delivered"
    wait_until(lambda: hooks.ids(path).count(sent.json()["intent_id"]) == 2, 30,
               "redelivered")
    assert merchant.call("DELETE", f"/v1/endpoints/{endpoint_id}").status_code == 204
    assert merchant.call("GET", f"/v1/endpoints/{endpoint_id}").status_code == 404
    assert merchant.call("DELETE", f"/v1/endpoints/{endpoint_id}").status_code == 404
    actions = [a for _, a in _actions(db, endpoint_id)]
    assert actions[:1] == ["create"] and actions[-1] == "delete"
    for action in ("test", "rotate_secret", "update", "recover", "redeliver"):
        assert action in actions, actions


def test_an_endpoint_failing_too_long_is_disabled_and_the_others_are_told(
        api: ApiServer, hooks: Receiver, impatient_sender: ConsumerProcess, db: Connection,
        endpoints: list[str]) -> None:
    merchant = Merchant(api)
    told = f"/ok/{unique('told')}"
    watcher = merchant.create(hooks, told, endpoints, event_types=["endpoint.*"])
    broken = merchant.create(hooks, f"/fail/{unique('broken')}", endpoints)
    assert merchant.call("POST", f"/v1/endpoints/{broken['endpoint_id']}/test"
                         ).status_code == 202
    wait_until(lambda: not merchant.call(
        "GET", f"/v1/endpoints/{broken['endpoint_id']}").json()["enabled"], 60, "disabled")
    shown = merchant.call("GET", f"/v1/endpoints/{broken['endpoint_id']}").json()
    assert shown["disabled_reason"].startswith("failing since")
    wait_until(lambda: any(b["type"] == "endpoint.disabled" for b in hooks.bodies(told)),
               30, "the merchant's other endpoint told")
    notice = next(b for b in hooks.bodies(told) if b["type"] == "endpoint.disabled")
    assert notice["data"]["endpoint_id"] == broken["endpoint_id"]
    assert ("notifier", "disabled") in _actions(db, broken["endpoint_id"])
    assert [b["type"] for b in hooks.bodies(told)] == ["endpoint.disabled"]
    assert watcher["enabled"] is True


def _state(db: Connection, delivery_id: str) -> str | None:
    intent, endpoint = delivery_id.split(".")
    with db.cursor() as cur:
        cur.execute("SELECT state FROM notification_deliveries WHERE intent_id = %s"
                    " AND endpoint_id = %s", (intent, endpoint))
        row = cur.fetchone()
    return None if row is None else row[0]
