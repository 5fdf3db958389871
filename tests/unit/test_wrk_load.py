"""The benchmark's wrk driver: the requests it writes are the ones the server gets."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from wrk_load import raw_request


def test_raw_request_is_a_complete_http_post() -> None:
    body = b'{"amount":"1.5"}'
    raw = raw_request("http://127.0.0.1:8080/webhooks/payments", body,
                      {"content-type": "application/json", "webhook-id": "msg_1"})
    head, _, sent_body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0] == "POST /webhooks/payments HTTP/1.1"
    assert "Host: 127.0.0.1:8080" in lines
    assert f"Content-Length: {len(body)}" in lines
    assert "webhook-id: msg_1" in lines
    assert sent_body == body


def test_raw_request_refuses_the_separator_byte() -> None:
    with pytest.raises(ValueError, match="NUL"):
        raw_request("http://127.0.0.1:1/x", b"a\0b", {})
