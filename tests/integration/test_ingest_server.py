"""The ingest served by a real uvicorn process: concurrency, database outage, fuzzing."""

from __future__ import annotations

import json
import multiprocessing
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg2
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode

from paystream.ingest import alchemy_signature, standard_webhooks
from paystream.launch import free_port, paystream_argv
from paystream.schema.migrate import apply_migrations
from paystream.stack import postgres
from paystream.stack.settings import StackSettings
from tests.support.ids import unique
from tests.support.ingest import (
    ALCHEMY_KEY,
    PAYMENTS_SECRET_BYTES,
    RunningServer,
    ingest_server,
    known_user,
    payment_body,
    payment_headers,
)

CONCURRENCY = 20


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with ingest_server() as running:
        yield running


def _count_rows(db, event_id: str) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM payment_events WHERE event_id = %s", (event_id,))
        return int(cur.fetchone()[0])


def _post_after_barrier(url: str, body: bytes, headers: dict[str, str],
                        barrier: Any, answers: Any) -> None:
    barrier.wait(timeout=30)  # all processes send at (nearly) the same instant
    try:
        answer = httpx.post(url, content=body, headers=headers, timeout=30)
        answers.put((answer.status_code, answer.json().get("status")))
    except Exception as exc:  # reported to the test, which fails on it
        answers.put((0, repr(exc)))


def _race(url: str, requests_: list[tuple[bytes, dict[str, str]]]) -> list[tuple[int, str]]:
    """Post each request from its own process, all released together."""
    ctx = multiprocessing.get_context("fork")
    barrier, answers = ctx.Barrier(len(requests_)), ctx.Queue()
    processes = [ctx.Process(target=_post_after_barrier, args=(url, b, h, barrier, answers))
                 for b, h in requests_]
    for p in processes:
        p.start()
    results = [answers.get(timeout=60) for _ in processes]
    for p in processes:
        p.join(timeout=30)
    return results


def test_twenty_concurrent_identical_requests_write_exactly_once(server: RunningServer,
                                                                 db) -> None:
    event_id = unique("ev-race")
    body = payment_body(event_id, known_user(), "7.77")
    headers = payment_headers(body)  # one delivery, sent 20 times at once
    results = _race(server.url + "/webhooks/payments", [(body, headers)] * CONCURRENCY)
    assert sorted(results) == [(200, "accepted")] + [(200, "duplicate")] * (CONCURRENCY - 1)
    assert _count_rows(db, event_id) == 1


def test_twenty_concurrent_conflicting_requests_accept_one(server: RunningServer, db) -> None:
    event_id, user = unique("ev-race"), known_user()
    requests_ = []
    for n in range(CONCURRENCY):
        body = payment_body(event_id, user, f"{n + 1}")
        requests_.append((body, payment_headers(body)))
    results = _race(server.url + "/webhooks/payments", requests_)
    assert sorted(results) == [(200, "accepted")] + [(409, "error")] * (CONCURRENCY - 1)
    assert _count_rows(db, event_id) == 1


# --- Postgres outage: on a private, throwaway cluster, never on a shared stack ----------

@pytest.fixture
def private_postgres(tmp_path: Path) -> Iterator[StackSettings]:
    """A Postgres cluster of its own on a free port, so stopping it disturbs no one."""
    stack = StackSettings.from_env().replaced(state_dir=tmp_path / "stack",
                                pg_port=free_port())
    try:
        postgres.ensure_cluster(stack)
        postgres.start(stack)
        postgres.ensure_role_and_database(stack)
        apply_migrations(stack.database_url)
    except Exception as exc:
        postgres.stop(stack)
        pytest.fail(f"could not start a private Postgres cluster: {exc}")
    try:
        yield stack
    finally:
        postgres.stop(stack)
        shutil.rmtree(stack.state_dir, ignore_errors=True)


def test_postgres_down_is_503_with_retry_after_and_nothing_is_lost(
        private_postgres: StackSettings) -> None:
    stack = private_postgres
    # The ingest logs in as its own role on the private cluster.
    env = {"PAYSTREAM_PG_PORT": str(stack.pg_port), "PAYSTREAM_INGEST_RETRY_AFTER_S": "3"}
    user = unique("user")
    with psycopg2.connect(stack.database_url) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    conn.close()
    before, during = unique("ev-before"), unique("ev-during")
    with ingest_server(env) as srv:
        url = srv.url + "/webhooks/payments"
        body = payment_body(before, user, "1")
        assert httpx.post(url, content=body, headers=payment_headers(body)).status_code == 200

        postgres.stop(stack)
        try:
            body = payment_body(during, user, "2")
            headers = payment_headers(body, msg_id="msg_outage")
            refused = httpx.post(url, content=body, headers=headers, timeout=10)
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "3"
            assert refused.json()["code"] == "database_unavailable"
            assert refused.elapsed.total_seconds() < 5  # inside the provider's timeout
            assert httpx.get(srv.admin_url + "/readyz").status_code == 503
            assert httpx.get(srv.url + "/healthz").status_code == 200
        finally:
            postgres.start(stack)

        # The provider retries the same delivery: now it is accepted.
        retried = httpx.post(url, content=body, headers=headers, timeout=10)
        assert retried.status_code == 200 and retried.json()["status"] == "accepted"
        assert httpx.get(srv.admin_url + "/readyz").status_code == 200
        log = srv.log_path.read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(line.get("trace_id") == "msg_outage"
               and line["event"].startswith("database unavailable") for line in lines)
    with psycopg2.connect(stack.database_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT event_id, amount::text FROM payment_events WHERE user_id = %s"
                    " ORDER BY event_id", (user,))
        assert sorted(cur.fetchall()) == sorted([(before, "1.000000000000000000"),
                                                 (during, "2.000000000000000000")])
    conn.close()


# --- schemathesis: no 5xx and no answer outside the schema -------------------------------

class _SignAsProvider(requests.auth.AuthBase):
    """Sign every generated request the way the provider would, over the bytes sent."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        body = request.body or b""
        body = body.encode() if isinstance(body, str) else body
        if request.path_url.startswith("/webhooks/alchemy"):
            request.headers["X-Alchemy-Signature"] = alchemy_signature.sign(
                body, ALCHEMY_KEY.encode())
        elif request.path_url.startswith("/webhooks/payments"):
            signed = payment_headers(body, secret=PAYMENTS_SECRET_BYTES)
            for name in (standard_webhooks.ID_HEADER, standard_webhooks.TIMESTAMP_HEADER,
                         standard_webhooks.SIGNATURE_HEADER):
                request.headers[name] = signed[name]
        return request


def _fuzz(server: RunningServer, mode: GenerationMode, signed: bool, examples: int) -> int:
    # The document is served on the admin port; each operation is called where it is
    # served (webhooks and /healthz on the public port, the rest on the admin port).
    schema = schemathesis.openapi.from_url(server.admin_url + "/openapi.json")
    session = requests.Session()
    if signed:
        session.auth = _SignAsProvider()
    calls = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        if mode is GenerationMode.NEGATIVE and operation.method.upper() != "POST":
            continue  # nothing to make invalid in a GET without parameters

        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: schemathesis.Case) -> None:
            nonlocal calls
            calls += 1
            public = case.path.startswith("/webhooks/") or case.path == "/healthz"
            response = case.call(base_url=server.url if public else server.admin_url,
                                 session=session, timeout=10)
            assert response.status_code < 500, (response.status_code, response.text)
            # Status code, content type, headers and body must match the schema.
            case.validate_response(response, checks=[
                schemathesis.checks.not_a_server_error,
                schemathesis.checks.status_code_conformance,
                schemathesis.checks.content_type_conformance,
                schemathesis.checks.response_headers_conformance,
                schemathesis.checks.response_schema_conformance,
            ])

        check()
    return calls


@pytest.mark.parametrize(("mode", "signed"), [
    (GenerationMode.POSITIVE, True),   # signed: exercises validation and the database
    (GenerationMode.NEGATIVE, True),   # signed but schema-violating bodies and headers
    (GenerationMode.POSITIVE, False),  # whatever schemathesis sends: refused with 401
])
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
        server: RunningServer, mode: GenerationMode, signed: bool) -> None:
    assert _fuzz(server, mode, signed, examples=60) > 0
    metrics = httpx.get(server.admin_url + "/metrics").text
    assert 'status="5' not in metrics


def test_the_console_script_refuses_a_short_secret(tmp_path: Path) -> None:
    import os
    import subprocess

    env = {**os.environ, "ALCHEMY_SIGNING_KEY": "too-short",
           "PAYMENTS_WEBHOOK_SECRET": "whsec_c2hvcnQ="}
    done = subprocess.run(paystream_argv("ingest", "--port", str(free_port())), env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "ALCHEMY_SIGNING_KEY is 9 bytes after decoding; at least 32" in done.stderr
