"""The edges' rules for values in a URL and a form (paystream/edge/params.py), and the
console's strict reading of a Host header (console/web.py host_name)."""

from __future__ import annotations

import pytest

from paystream.console_kit.web import host_name
from paystream.edge.params import form_refusal, url_refusal


@pytest.mark.parametrize(("host", "name"), [
    ("localhost", "localhost"), ("LocalHost:8102", "localhost"),
    ("127.0.0.1:1", "127.0.0.1"), ("[::1]:8102", "[::1]"), ("[::1]", "[::1]"),
    ("console.example.org:65535", "console.example.org"),
])
def test_a_host_and_an_optional_port_name_the_host(host: str, name: str) -> None:
    assert host_name(host) == name


@pytest.mark.parametrize("host", [
    None, "", "localhost:1@evil.example", "user@localhost", "localhost:80:81",
    "localhost:65536", "localhost:", "localhost/x", "local host", "[::1", "::1",
    "localhost:８０", "lócalhost", "localhost\x00", "localhost:1 ", "[::1]x",
])
def test_anything_else_names_no_host(host: str | None) -> None:
    assert host_name(host) is None


@pytest.mark.parametrize(("path", "query"), [
    (b"/search", b"q=%C5%BC%C3%B3%C5%82w+x"), (b"/events/a%2Fb", b""),
    (b"/audit", b"before=99999999999999999999999"),  # a bound is the route's rule
])
def test_utf8_without_control_characters_passes_the_door(path: bytes, query: bytes) -> None:
    assert url_refusal(path, query) is None


@pytest.mark.parametrize(("path", "query", "said"), [
    (b"/search", b"q=%00", "control"), (b"/events/a%00", b"", "control"),
    (b"/search", b"q=%0D%0A", "control"), (b"/search", b"q=%C2%85", "control"),
    (b"/search", b"q=%FF", "UTF-8"), (b"/users/%ED%A0%80", b"", "UTF-8"),
    (b"/search", b"q=%E2%82", "UTF-8"), (b"/search", b"q=\x7f", "control"),
])
def test_nul_controls_and_bytes_that_are_not_utf8_are_refused(path: bytes, query: bytes,
                                                               said: str) -> None:
    refusal = url_refusal(path, query)
    assert refusal is not None and said in refusal


def test_a_form_may_hold_lines_and_tabs_but_no_other_control_character() -> None:
    assert form_refusal({"reason": "first line\r\nsecond\tline", "count": "3"}) is None
    for value in ("a\x00b", "\x1b[31m", "\x7f", "\u0085"):
        refusal = form_refusal({"reason": value})
        assert refusal is not None and "reason" in refusal
    assert form_refusal({"re\x00ason": "x"}) is not None
