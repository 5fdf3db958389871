"""The ledger's consequences, found where their features declare them and ordered as
they declare (paystream/ledger_consequences.py): the product's order, a test's own
consequence in its declared place, and each declaration that cannot be ordered refused
with a message naming it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from paystream import ledger_consequences
from paystream.consume import ledger_handler
from paystream.env import SettingsError
from paystream.ledger_consequences import (
    PRODUCT,
    DeclarationError,
    Declared,
    Found,
    found,
    in_order,
)
from paystream.schema.db import Cursor


class Nothing:
    def __init__(self, name: str) -> None:
        self.name = name

    def write(self, cur: Cursor, batch: Any) -> None:
        pass


def declared(name: str, *after: str, last: bool = False) -> Found:
    return Found(f"features.{name}_consequence",
                 Declared(name, lambda: Nothing(name), after=after, last=last))


def names(declarations: list[Found]) -> list[str]:
    return [d.name for d in in_order(declarations)]


def test_the_product_runs_the_chain_deposits_then_the_invoices_then_the_notifications(
        ) -> None:
    product = found(PRODUCT)
    assert {f.declared.name: f.module for f in product} == {
        "chain_deposits": "paystream.consumers.ledger.chain_consequence",
        "invoices": "paystream.invoices.ledger_consequence",
        "notifications": "paystream.notify.ledger_consequence"}
    assert names(product) == ["chain_deposits", "invoices", "notifications"]


def test_a_consequence_declared_in_a_test_alone_takes_its_declared_place() -> None:
    everything = found((*PRODUCT, "tests.support"))
    assert "tests.support.bonus_consequence" in {f.module for f in everything}
    # By name it would run first; it runs after the invoices, as it declares.
    assert names(everything) == ["chain_deposits", "invoices", "bonus_points",
                                 "notifications"]


def test_each_runs_after_what_it_names_the_last_one_last_and_otherwise_by_name() -> None:
    assert names([declared("z", last=True), declared("c", "d"), declared("d"),
                  declared("a"), declared("b", "c")]) == ["a", "d", "c", "b", "z"]
    assert names([declared("b"), declared("a")]) == ["a", "b"]
    assert names([]) == []


@pytest.mark.parametrize(("declarations", "message"), [
    ([declared("a"), Found("elsewhere.a_consequence", declared("a").declared)],
     "'a' is declared twice: in features.a_consequence and in elsewhere.a_consequence"),
    ([declared("a", "b", "c"), declared("b")],
     r"'a' \(features.a_consequence\) runs after 'c', which no module declares"),
    ([declared("a", last=True), declared("b", last=True)],
     r"'a' \(features.a_consequence\) and 'b' \(features.b_consequence\) both run last"),
    ([declared("a", "b"), declared("b", "a"), declared("c")],
     r"wait for each other \(a cycle\): 'a' after \['b'\], 'b' after \['a'\]"),
    ([declared("a", "a")], r"a cycle\): 'a' after \['a'\]"),
    ([declared("n", last=True), declared("x", "n")], r"a cycle\): 'n' after \['x'\]"),
], ids=["twice", "undeclared", "two-last", "cycle", "itself", "after-the-last"])
def test_a_declaration_that_cannot_be_ordered_refuses_to_start(
        declarations: list[Found], message: str) -> None:
    with pytest.raises(DeclarationError, match=message):
        in_order(declarations)


def test_a_consequence_module_that_declares_nothing_refuses_to_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    feature = tmp_path / "stray_feature"
    (feature / "deep").mkdir(parents=True)
    (feature / "__init__.py").write_text("")
    (feature / "deep" / "__init__.py").write_text("")
    (feature / "deep" / "stray_consequence.py").write_text("CONSEQUENCE = 'invoices'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DeclarationError, match="stray_feature.deep.stray_consequence is"
                       r" named as a ledger consequence's module \(\*_consequence\) but"
                       " declares no CONSEQUENCE"):
        found(["stray_feature"])


def test_the_ledger_handler_refuses_to_start_naming_both_modules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`paystream consume ledger`'s handler, as it is built; a SettingsError, which every
    command prints and exits 2 on (paystream/cli.py)."""
    feature = tmp_path / "twice_feature"
    feature.mkdir()
    (feature / "__init__.py").write_text("")
    (feature / "ledger_consequence.py").write_text(
        "from paystream.ledger_consequences import Declared\n"
        "CONSEQUENCE = Declared('invoices', object)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ledger_consequences, "PRODUCT", (*PRODUCT, "twice_feature"))
    with pytest.raises(SettingsError, match=re.escape(
            "ledger consequence 'invoices' is declared twice: in"
            " paystream.invoices.ledger_consequence and in twice_feature.ledger_consequence")):
        ledger_handler()
