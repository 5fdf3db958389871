"""The journal and the outcomes are written with COPY: its text format must survive any
event id."""

from __future__ import annotations

from paystream.schema.pgcopy import copy_text


def test_copy_text_escapes_what_copy_would_interpret() -> None:
    assert copy_text("plain-id:1") == "plain-id:1"
    assert copy_text("a\\b") == "a\\\\b"
    assert copy_text("t\tn\nr\r") == "t\\tn\\nr\\r"
