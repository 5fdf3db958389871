"""The ingest's HTTP edge, as `paystream ingest` serves it (a real uvicorn process on
httptools), probed with raw sockets: header limits (431), deadlines (408), the
connection cap (503 + Retry-After), the admin split, and who pays for rate limits."""

from __future__ import annotations

import contextlib
import socket
import time
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

ENV = {"PAYSTREAM_INGEST_HEADER_TIMEOUT_S": "1",
       "PAYSTREAM_INGEST_BODY_TIMEOUT_S": "1", "PAYSTREAM_INGEST_MAX_CONNECTIONS": "3"}


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with ingest_server(ENV) as running:
        yield running


def _connect(server: RunningServer, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", server.port))
    sock.settimeout(10)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (b"" or what came before a reset)."""
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def _exchange(server: RunningServer, data: bytes) -> bytes:
    sock = _connect(server)
    # Refused while still sending: what was answered is read below.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(data)
    try:
        return _read_all(sock)
    finally:
        sock.close()


def _trickle(sock: socket.socket, byte: bytes, times: int) -> None:
    """A byte every 0.25 s (a slow-loris client), until sent `times` times or the
    server closes the connection."""
    for _ in range(times):
        time.sleep(0.25)
        try:
            sock.sendall(byte)
        except (BrokenPipeError, ConnectionResetError):
            return


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def test_an_oversized_head_is_431_before_it_is_buffered(server: RunningServer) -> None:
    # A head that never ends: 20 KiB of one header, then silence. The server answers
    # as soon as 16 KiB are in, without waiting for the rest.
    sock = _connect(server)
    started = time.monotonic()
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000)
    answer = _read_all(sock)
    sock.close()
    assert _status(answer) == 431 and b'"code":"headers_too_large"' in answer
    assert b"connection: close" in answer.lower()
    assert time.monotonic() - started < 0.9  # not the 1 s head deadline


@pytest.mark.parametrize(("head", "code"), [
    (b"X-Big: " + b"a" * 256 * 1024 + b"\r\n", b"headers_too_large"),  # one 256 KiB header
    (b"".join(b"X-%d: %s\r\n" % (n, b"b" * 8000) for n in range(128)),
     b"headers_too_large"),  # 1 MiB of headers
    (b"".join(b"X-%d: 1\r\n" % n for n in range(10_000)), b"too_many_headers"),
    (b"".join(b"X-%d: 1\r\n" % n for n in range(101)), b"too_many_headers"),
])
def test_the_heads_found_on_main_are_refused(server: RunningServer, head: bytes,
                                             code: bytes) -> None:
    answer = _exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
    # 431, or closed before the answer could be read (a reset while we still sent):
    # never served.
    assert answer == b"" or (_status(answer) == 431 and code in answer), answer[:200]


def test_a_head_within_the_limits_is_served(server: RunningServer) -> None:
    # Exactly 100 headers (Host, Connection and 98 more), ~11 KiB.
    head = b"".join(b"X-%d: %s\r\n" % (n, b"c" * 100) for n in range(98))
    answer = _exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       + head + b"\r\n")
    assert _status(answer) == 200


def test_a_trickled_head_is_408_at_the_deadline(server: RunningServer) -> None:
    sock = _connect(server)
    started = time.monotonic()
    sock.sendall(b"POST /webhooks/payments HTTP/1.1\r\n")
    _trickle(sock, b"X", 8)  # must not keep the head alive
    answer = _read_all(sock)
    sock.close()
    assert _status(answer) == 408 and b'"code":"header_timeout"' in answer
    assert 0.9 < time.monotonic() - started < 3


def test_an_idle_connection_is_closed_at_the_head_deadline(server: RunningServer) -> None:
    sock = _connect(server)
    started = time.monotonic()
    assert _read_all(sock) == b""
    sock.close()
    assert 0.9 < time.monotonic() - started < 3


@pytest.mark.parametrize("trickle", [False, True])
def test_a_body_that_does_not_arrive_in_time_is_408_and_the_connection_closed(
        server: RunningServer, trickle: bool) -> None:
    sock = _connect(server)
    started = time.monotonic()
    sock.sendall(b"POST /webhooks/payments HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
    _trickle(sock, b" ", 8 if trickle else 0)  # does not extend the deadline
    answer = _read_all(sock)
    sock.close()
    assert _status(answer) == 408 and b'"code":"body_timeout"' in answer
    assert b"connection: close" in answer.lower()
    assert 0.9 < time.monotonic() - started < 3


def test_a_body_nobody_reads_does_not_hold_the_connection(server: RunningServer) -> None:
    sock = _connect(server)
    started = time.monotonic()
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
    answer = _read_all(sock)  # answered at once, then closed at the body deadline
    sock.close()
    assert _status(answer) == 200 and answer.count(b"HTTP/1.1 ") == 1, answer
    assert 0.9 < time.monotonic() - started < 3


def test_past_the_connection_cap_a_request_is_503_with_retry_after(
        server: RunningServer) -> None:
    held = [_connect(server) for _ in range(3)]  # the cap of ENV
    try:
        time.sleep(0.2)  # the server has accepted them
        answer = _exchange(server, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(answer) == 503 and b'"code":"too_many_connections"' in answer
        assert b"retry-after: 5" in answer.lower() and b"connection: close" in answer.lower()
        # The admin port is not counted: monitoring still works.
        assert httpx.get(server.admin_url + "/healthz").status_code == 200
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.2)
    assert httpx.get(server.url + "/healthz").status_code == 200  # the count went down


def test_the_public_port_serves_webhooks_and_healthz_only(server: RunningServer) -> None:
    for path in ("/metrics", "/docs", "/openapi.json", "/readyz", "/redoc", "/nowhere"):
        answer = httpx.get(server.url + path)
        assert answer.status_code == 404, path
        assert answer.json()["code"] == "http_404" and answer.json()["trace_id"]
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(server.url + "/webhooks/payments").status_code == 405


def test_the_admin_port_serves_ops_on_loopback_only(server: RunningServer) -> None:
    admin = server.admin_url
    assert "paystream_ingest_requests_total" in httpx.get(admin + "/metrics").text
    assert httpx.get(admin + "/readyz").json() == {"status": "ready"}
    assert httpx.get(admin + "/docs").status_code == 200
    assert "/webhooks/payments" in httpx.get(admin + "/openapi.json").json()["paths"]
    body = payment_body(unique("ev"), unique("user"))
    refused = httpx.post(admin + "/webhooks/payments", content=body,
                         headers=payment_headers(body))
    assert refused.status_code == 404  # money enters by the public door only
    # Bound to 127.0.0.1 itself, not to every address: another loopback address of this
    # machine finds nothing listening there.
    admin_port = int(admin.rsplit(":", 1)[1])
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", admin_port), timeout=2).close()


def _post_from(server: RunningServer, source: str, body: bytes,
               headers: dict[str, str]) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport) as client:
        return client.post(server.url + "/webhooks/payments", content=body, headers=headers)


def test_junk_with_spoofed_forwarded_for_cannot_drain_the_providers_bucket(db) -> None:
    env = {**ENV, "PAYSTREAM_INGEST_RATE_PER_SECOND": "0.001",
           "PAYSTREAM_INGEST_RATE_BURST": "3",
           "PAYSTREAM_INGEST_AUTH_FAILURE_RATE_PER_SECOND": "0.001",
           "PAYSTREAM_INGEST_AUTH_FAILURE_BURST": "4", "PAYSTREAM_INGEST_MAX_CONNECTIONS": "100"}
    with ingest_server(env) as srv:
        junk = payment_body(unique("ev-junk"), unique("user"))
        statuses = [_post_from(srv, "127.0.0.2", junk, {
            "content-type": "application/json", "x-forwarded-for": f"198.51.100.{n}"}
        ).status_code for n in range(10)]
        # Each spoofed address would have been a fresh bucket; the peer address is not.
        assert statuses == [401] * 4 + [429] * 6
        user = known_user()
        signed = [payment_body(unique("ev"), user, "1") for _ in range(4)]
        answers = [_post_from(srv, "127.0.0.1", b, payment_headers(b)) for b in signed]
    # The provider's bucket (burst 3) was untouched by the junk.
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[3].json()["code"] == "rate_limited"
    assert int(answers[3].headers["retry-after"]) >= 1


def test_forwarded_for_is_believed_from_a_configured_proxy_only() -> None:
    env = {**ENV, "PAYSTREAM_INGEST_AUTH_FAILURE_RATE_PER_SECOND": "0.001",
           "PAYSTREAM_INGEST_AUTH_FAILURE_BURST": "2", "PAYSTREAM_INGEST_MAX_CONNECTIONS": "100",
           "PAYSTREAM_INGEST_TRUSTED_PROXIES": "127.0.0.1"}
    junk = payment_body(unique("ev-junk"), unique("user"))
    headers = {"content-type": "application/json"}
    with ingest_server(env) as srv:
        # Through the trusted proxy, each client named in the header has its own bucket.
        via_proxy = [_post_from(srv, "127.0.0.1", junk, headers | {
            "x-forwarded-for": f"198.51.100.{n}"}).status_code for n in range(4)]
        # From an untrusted peer the header is ignored: one bucket, the peer's.
        direct = [_post_from(srv, "127.0.0.2", junk, headers | {
            "x-forwarded-for": f"198.51.100.{n}"}).status_code for n in range(4)]
    assert via_proxy == [401] * 4
    assert direct == [401, 401, 429, 429]


@pytest.mark.parametrize("same_as_public", [False, True])
def test_an_admin_port_it_cannot_have_refuses_to_start(same_as_public: bool) -> None:
    import os
    import subprocess

    from paystream.launch import free_port, paystream_argv
    from tests.support.ingest import ingest_env

    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        admin_port = port if same_as_public else taken.getsockname()[1]
        env = {**os.environ, **ingest_env(), "PAYSTREAM_INGEST_ADMIN_PORT": str(admin_port)}
        done = subprocess.run(paystream_argv("ingest", "--port", str(port)), env=env,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr[-500:]
    assert ("is the public port" if same_as_public
            else f"cannot listen on the admin address 127.0.0.1:{admin_port}") in done.stderr
