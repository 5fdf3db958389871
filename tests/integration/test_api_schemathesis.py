"""schemathesis against the merchant API's own OpenAPI document, with a valid key: no
answer is a 5xx, and every answer matches the document (status, content type, headers,
body). The document is served on the admin port; /v1 on the public one."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.support.api import ApiServer, api_server, bearer, new_key


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    with api_server({"PAYSTREAM_API_RATE_PER_SECOND": "10000",
                     "PAYSTREAM_API_RATE_BURST": "10000"}) as running:
        yield running


def _fuzz(server: ApiServer, key: str | None, mode: GenerationMode, examples: int
          ) -> dict[str, int]:
    """Calls made per route (path template and method), each answer checked."""
    schema = schemathesis.openapi.from_url(server.admin_url + "/openapi.json")
    session = requests.Session()
    if key is not None:
        session.headers.update(bearer(key))
    calls: dict[str, int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case) -> None:
            route = f"{case.method.upper()} {case.operation.path}"
            calls[route] = calls.get(route, 0) + 1
            public = case.path.startswith("/v1/") or case.path == "/healthz"
            response = case.call(base_url=server.url if public else server.admin_url,
                                 session=session, timeout=10)
            assert response.status_code < 500, (case.path, response.status_code,
                                                 response.text)
            case.validate_response(response, checks=[
                schemathesis.checks.not_a_server_error,
                schemathesis.checks.status_code_conformance,
                schemathesis.checks.content_type_conformance,
                schemathesis.checks.response_headers_conformance,
                schemathesis.checks.response_schema_conformance,
            ])

        try:
            check()
        except Unsatisfiable:
            # Negative mode on an operation with nothing to make invalid (no parameter,
            # no body: /healthz, /metrics, /readyz).
            assert mode is GenerationMode.NEGATIVE, operation.path
    return calls


@pytest.mark.parametrize(("mode", "with_key"), [
    (GenerationMode.POSITIVE, True),   # valid requests with a read+write key
    (GenerationMode.NEGATIVE, True),   # schema-violating parameters and bodies
    (GenerationMode.POSITIVE, False),  # no key: refused with 401, never a 5xx
])
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
        server: ApiServer, mode: GenerationMode, with_key: bool) -> None:
    key = new_key("read,write")[1] if with_key else None
    calls = _fuzz(server, key, mode, examples=40)
    # Every route of the document is exercised, the invoices' among them.
    assert {"POST /v1/invoices", "GET /v1/invoices", "GET /v1/invoices/{invoice_id}",
            "POST /v1/invoices/{invoice_id}/cancel"} <= {r for r, n in calls.items() if n}
    metrics = httpx.get(server.admin_url + "/metrics").text
    assert 'status="5' not in metrics
