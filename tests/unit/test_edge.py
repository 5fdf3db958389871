"""The HTTP edge kit (paystream/edge/) and the two edges on it: every /v1 route of the
merchant API gets its database only through the key's dependency, refusals come in the
order they always did, the observer's trace id, log fields, metrics and JSON 500, and
the admin port's guard. No services: the API's settings name no reachable database, so
a request that reached Postgres would answer 503."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry, generate_latest
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from paystream.api.app import ROUTERS, create_app
from paystream.api.auth import Access, KeyAccess
from paystream.api.settings import ApiSettings
from paystream.edge.errors import (
    ConflictError,
    InvalidRequestError,
    RefusalError,
    UnauthorizedError,
)
from paystream.edge.metrics import AnswerMetrics
from paystream.edge.observe import LOG_SCOPE_KEY, RequestObserver, trace_of
from paystream.edge.serve import serve, uvicorn_config
from paystream.env import SettingsError
from paystream.ingest import errors as ingest_errors


def _public() -> TestClient:
    # TestClient's requests arrive on port 80: not the admin port here.
    return TestClient(create_app(ApiSettings(admin_port=8101)).__call__)


def test_every_v1_route_takes_its_database_from_the_key_dependency() -> None:
    routes = [r for module in ROUTERS for r in module.router.routes
              if isinstance(r, APIRoute)]
    paths = create_app(ApiSettings()).api.openapi()["paths"]
    served = {p for p in paths if p.startswith("/v1/")}
    assert {r.path.replace(":path", "") for r in routes} == served and len(routes) == 26
    for route in routes:
        given = [d.call for d in route.dependant.dependencies]
        assert any(isinstance(call, KeyAccess) for call in given), route.path
        for method in route.methods:
            operation = paths[route.path.replace(":path", "")][method.lower()]
            assert operation["security"] == [{"HTTPBearer": []}], route.path


def test_a_request_without_a_key_is_refused_before_any_database_work() -> None:
    client = _public()
    for method, path in (("GET", "/v1/events/e-1"), ("GET", "/v1/withdrawals/w-1"),
                         ("GET", "/v1/users/u-1/transactions"),
                         ("GET", "/v1/users/u-1/deposit-addresses")):
        answer = client.request(method, path)
        assert answer.status_code == 401, path
        assert answer.json()["code"] == "missing_api_key"
        assert answer.headers["x-request-id"] == answer.json()["trace_id"]
    bad = client.post("/v1/users", json={"user_id": "u-1"},
                      headers={"Authorization": "Bearer not-a-key"})
    assert bad.status_code == 401 and bad.json()["code"] == "invalid_api_key"


def test_refusals_come_in_the_order_they_always_did() -> None:
    client = _public()
    # A parameter FastAPI validates: 400 before the missing key.
    assert client.get("/v1/users/u-1/transactions?limit=0").status_code == 400
    # A route's own rule on a parameter (the cursor, the moment) comes first too.
    cursor = client.get("/v1/users/u-1/transactions?cursor=x")
    assert cursor.status_code == 400 and cursor.json()["code"] == "invalid_cursor"
    moment = client.get("/v1/users/u-1/balances?at=0001-01-01T00:00:00%2B15:00")
    assert moment.status_code == 400
    # A missing Idempotency-Key header is FastAPI's: 400 with the documented code ...
    body = {"user_id": "u-1", "asset": "XXX", "amount": "1", "destination": "d"}
    missing = client.post("/v1/withdrawals", json=body)
    assert missing.status_code == 400 and missing.json()["code"] == "missing_idempotency_key"
    # ... but the withdrawal's own rules come after the key: 401, not 400.
    no_key = client.post("/v1/withdrawals", json=body, headers={"Idempotency-Key": "k 1"})
    assert no_key.status_code == 401 and no_key.json()["code"] == "missing_api_key"


def test_an_unknown_path_and_a_wrong_method_answer_in_the_error_body() -> None:
    client = _public()
    unknown = client.get("/v2/anything", headers={"X-Request-ID": "caller-chose-this"})
    assert unknown.status_code == 404
    assert unknown.json() == {"status": "error", "code": "http_404", "reason": "Not Found",
                              "trace_id": "caller-chose-this"}
    assert unknown.headers["x-request-id"] == "caller-chose-this"
    wrong = client.put("/v1/users")
    assert wrong.status_code == 405 and wrong.json()["code"] == "http_405"


def test_the_ingests_refusals_are_the_kits_statuses_with_their_own_codes() -> None:
    assert issubclass(ingest_errors.SignatureError, UnauthorizedError)
    assert issubclass(ingest_errors.PayloadError, InvalidRequestError)
    duplicate = ingest_errors.ConflictingDuplicateError("other content", event_id="e-1")
    assert isinstance(duplicate, ConflictError)
    assert (duplicate.status, duplicate.code, duplicate.event_id) == (
        409, "conflicting_duplicate", "e-1")
    assert ingest_errors.DatabaseUnavailableError.status == 503
    assert issubclass(ingest_errors.IngestError, Exception)
    assert ingest_errors.IngestError is RefusalError


def _observed(app: Any, registry: CollectorRegistry, **options: Any) -> TestClient:
    metrics = AnswerMetrics(registry, requests="t_requests", latency="t_seconds",
                            label="endpoint", buckets=(0.1, 1.0))
    observer = RequestObserver(app, metrics.observe, service="test",
                               endpoint=lambda scope: scope["path"], **options)
    return TestClient(observer, raise_server_exceptions=False)


def test_the_observer_answers_an_unanswered_exception_with_a_counted_json_500() -> None:
    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug")

    registry = CollectorRegistry()
    answer = _observed(broken, registry).get("/x", headers={"X-Request-ID": "r-1"})
    assert answer.status_code == 500
    assert json.loads(answer.content) == {"status": "error", "code": "internal_error",
                                          "reason": "unexpected server error",
                                          "trace_id": "r-1"}
    assert answer.headers["x-request-id"] == "r-1"
    scraped = generate_latest(registry).decode()
    assert 't_requests_total{endpoint="/x",status="500"} 1.0' in scraped
    assert 't_seconds_count{endpoint="/x",status_class="5xx"} 1.0' in scraped


def test_the_delivery_id_is_the_trace_id_only_where_the_edge_names_its_header() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((trace_of(scope).trace_id, scope[LOG_SCOPE_KEY]))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    headers = {"webhook-id": "msg_1"}
    _observed(app, CollectorRegistry(), delivery_id_header="webhook-id").get("/", headers=headers)
    _observed(app, CollectorRegistry()).get("/", headers=headers)
    assert seen[0] == ("msg_1", {})
    assert seen[1][0] != "msg_1" and len(seen[1][0]) == 32


def test_the_admin_port_may_not_be_the_public_port() -> None:
    config = uvicorn_config("paystream.api.app:create_app_from_env", "127.0.0.1", 8100, 1)
    with pytest.raises(SettingsError, match="PAYSTREAM_API_ADMIN_PORT 8100 is the public"):
        serve(config, admin_host="127.0.0.1", admin_port=8100,
              admin_port_variable="PAYSTREAM_API_ADMIN_PORT")


def test_access_without_a_bearer_token_refuses_before_touching_the_database() -> None:
    # No authenticator and no database: a 401 must come before either is used.
    access = Access(None, None, None, None)  # type: ignore[arg-type]
    with pytest.raises(UnauthorizedError, match="API key is required"):
        access.key()
    with pytest.raises(UnauthorizedError, match="API key is required"):
        asyncio.run(access.read(lambda cur: None))
