"""The journal is written with COPY: its text format must survive any event id."""

from __future__ import annotations

from paystream.consumers.ledger import _copy_text


def test_copy_text_escapes_what_copy_would_interpret() -> None:
    assert _copy_text("plain-id:1") == "plain-id:1"
    assert _copy_text("a\\b") == "a\\\\b"
    assert _copy_text("t\tn\nr\r") == "t\\tn\\nr\\r"
