"""reconcile --chain's verdicts (finality/chain_reconcile.py) on a fake node and fake books:
less on chain than the books is a shortfall, more a surplus, each named by address and
asset; every token of the network is read at every address; clean is one line."""

from __future__ import annotations

from typing import Any

from paystream.finality import chain_reconcile
from paystream.finality.chain_reconcile import BALANCE_OF_CALL, Holding

NETWORK = "ETH_TEST"
TOKEN = "0x" + "77" * 20
A, B = "0x" + "aa" * 20, "0x" + "bb" * 20


class FakeCursor:
    """Answers the two reads of a chain reconciliation."""

    def __init__(self, deposits: list[tuple[Any, ...]], addresses: list[str]) -> None:
        self.deposits, self.addresses = deposits, addresses
        self.rows: list[tuple[Any, ...]] = []

    def execute(self, sql: str, params: Any = None) -> None:
        self.rows = self.deposits if "chain_deposits" in sql else [(a,) for a in self.addresses]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class FakeNode:
    network = NETWORK

    def __init__(self, wei: dict[str, int], tokens: dict[str, int]) -> None:
        self.wei, self.tokens = wei, tokens
        self.calls: list[tuple[str, str, int | str]] = []

    def balance(self, address: str, block: int) -> int:
        return self.wei.get(address, 0)

    def call(self, to: str, data: str, block: int | str = "latest") -> str | None:
        self.calls.append((to, data, block))
        assert to == TOKEN and data.startswith(BALANCE_OF_CALL)
        owner = "0x" + data[-40:]
        return "0x" + format(self.tokens.get(owner, 0), "064x")


def _report(wei: dict[str, int], tokens: dict[str, int]) -> chain_reconcile.ChainReport:
    books = [(A, f"{NETWORK}:native", None, 18, 10**18),
             (A, f"{NETWORK}:{TOKEN}", TOKEN, 6, 5_000_000)]
    node = FakeNode(wei, tokens)
    report = chain_reconcile.reconcile(FakeCursor(books, [A, B]), node, 42)  # type: ignore[arg-type]
    assert node.calls and all(block == 42 for _, _, block in node.calls)  # at that block
    return report


def test_the_chain_holding_what_the_books_say_is_clean() -> None:
    report = _report({A: 10**18}, {A: 5_000_000})
    assert report.addresses == 2 and len(report.holdings) == 4  # native + token at each
    assert report.problems == []
    text, clean = chain_reconcile.networks_report([report])
    assert clean and text.endswith("ok, the chain holds what the books say")


def test_less_on_chain_is_a_shortfall_more_a_surplus_named_by_address() -> None:
    report = _report({A: 10**18 - 1}, {A: 5_000_000, B: 3})  # B: a token never credited
    assert [(h.address, h.asset, h.problem) for h in report.problems] == [
        (A, f"{NETWORK}:native", "shortfall"), (B, f"{NETWORK}:{TOKEN}", "surplus")]
    text, clean = chain_reconcile.networks_report([report])
    assert not clean
    assert "1 SHORTFALL(S), 1 SURPLUS(ES)" in text
    assert "-0.000000000000000001" in text and "0.000003" in text


def test_a_holding_compares_base_units() -> None:
    held = Holding(NETWORK, A, "x", 6, books=1_000_001, on_chain=1_000_000)
    assert held.problem == "shortfall" and str(held.amount(held.books)) == "1.000001"
    assert Holding(NETWORK, A, "x", 6, 5, 5).problem is None


def test_the_chain_flags_need_chain_and_user_does_not_apply(capsys: Any) -> None:
    from paystream.cli import main

    assert main(["reconcile", "--loop", "--network", "ETH_TEST"]) == 2
    assert "--network, --loop needs --chain" in capsys.readouterr().err
    assert main(["reconcile", "--chain", "--user", "u1"]) == 2
    assert "--user does not apply" in capsys.readouterr().err
