"""Each consumer kind's default batch size, and --batch-size over it."""

from __future__ import annotations

import argparse

import pytest

from paystream import consume


def _settings(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    consume.register(parser.add_subparsers())
    return consume.settings_from_args(parser.parse_args(["consume", *argv])).batch_size


@pytest.mark.parametrize(("kind", "size"), [("ledger", 2000), ("dlq-mirror", 1000),
                                             ("notifier", 1000)])
def test_each_kind_has_its_own_default(kind: str, size: int) -> None:
    assert _settings(kind) == size


def test_an_explicit_batch_size_wins() -> None:
    assert _settings("ledger", "--batch-size", "200") == 200
    assert _settings("notifier", "--batch-size", "7") == 7


def test_the_help_names_every_default() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    consume.register(sub)
    text = sub.choices["consume"].format_help()
    assert "2000 ledger" in " ".join(text.split())
    assert "1000 notifier" in " ".join(text.split())
