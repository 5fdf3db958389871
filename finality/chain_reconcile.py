"""`paystream reconcile --chain`: the books checked against the chain itself.

For each network, at one block (the block the chain scanner reads up to: the finalized
block, or head - credit depth), every registered deposit address's on-chain balance is
compared with the custody the books posted for it up to that block:

  books     Σ chain_deposits.raw_value into the address, of blocks <= that block, not
            reorged nor reversed (the deposits the custody account holds, as
            consumers/ledger/conservation.py counts it), per asset;
  on chain  eth_getBalance at that block (the native coin), and `balanceOf(address)` by
            eth_call at that block for every token the network's deposits were in.

Less on chain than on the books is a SHORTFALL (money the books say we hold is gone);
more is an unexplained SURPLUS (a transfer never credited, or a balance from before the
address was ours). Either is reported with the address, and the command exits 1.
docs/ledger.md#reconciling-against-the-chain says what the check assumes. The RPC calls
go through the finality watcher's client (timeouts, breaker): paystream.finality.rpc.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from prometheus_client import Counter, Gauge

from paystream.finality.rpc import ChainRpc
from paystream.finality.scanner.blocks import NATIVE_DECIMALS
from paystream.operator_cli import format_table
from paystream.schema.amounts import format_amount
from paystream.schema.chain import deposit_asset
from paystream.schema.db import Cursor
from paystream.schema.transfers import signed

# ERC-20 balanceOf(address) selector; the address follows, left-padded to 32 bytes.
BALANCE_OF_CALL = "0x70a08231"
# Deposits in these states left custody (the ledger's conservation check says the same).
RELEASED_STATES = ("reorged", "reversed")

# -- the scheduled run's metrics (`reconcile --chain --loop`), declared once -----------
SHORTFALL = Gauge("paystream_chain_reconcile_shortfall",
                  "Deposit address holdings short on chain against the books, last run",
                  ["network"])
SURPLUS = Gauge("paystream_chain_reconcile_surplus",
                "Deposit address holdings above the books on chain, last run", ["network"])
CHECKED_BLOCK = Gauge("paystream_chain_reconcile_block",
                      "The block the last chain reconciliation read", ["network"])
LAST_RUN = Gauge("paystream_chain_reconcile_last_run_timestamp_seconds",
                 "When the last chain reconciliation completed", ["network"])
FAILED = Counter("paystream_chain_reconcile_failures",
                 "Chain reconciliations that could not complete (node or database)",
                 ["network"])


@dataclass(frozen=True)
class Holding:
    """One address's balance of one asset: the books' against the chain's (base units)."""

    network: str
    address: str
    asset: str
    decimals: int
    books: int
    on_chain: int

    @property
    def problem(self) -> str | None:
        if self.on_chain < self.books:
            return "shortfall"
        return "surplus" if self.on_chain > self.books else None

    def amount(self, raw: int) -> Decimal:
        return Decimal(raw).scaleb(-self.decimals)


@dataclass
class ChainReport:
    network: str
    block: int
    addresses: int = 0
    holdings: list[Holding] = field(default_factory=list)

    @property
    def problems(self) -> list[Holding]:
        return [h for h in self.holdings if h.problem is not None]

    def count(self, problem: str) -> int:
        return sum(1 for h in self.holdings if h.problem == problem)


@dataclass(frozen=True)
class BookEntry:
    asset: str
    token_contract: str | None
    decimals: int
    raw: int


def books(cur: Cursor, network: str, up_to_block: int) -> dict[str, list[BookEntry]]:
    """address -> what the books hold for it, per asset, from deposits of blocks up to
    `up_to_block` (where a deposit was finalised, if the watcher moved it)."""
    cur.execute(
        "SELECT recipient, asset, token_contract, max((chain->>'decimals')::int),"
        " sum(raw_value) FROM chain_deposits WHERE network = %s AND state <> ALL(%s)"
        " AND coalesce(final_block_number, block_number) <= %s"
        " GROUP BY recipient, asset, token_contract ORDER BY 1, 2",
        (network, list(RELEASED_STATES), up_to_block))
    held: dict[str, list[BookEntry]] = {}
    for recipient, asset, token, decimals, raw in cur.fetchall():
        held.setdefault(recipient, []).append(BookEntry(
            asset, token, NATIVE_DECIMALS if decimals is None else int(decimals), int(raw)))
    return held


def addresses(cur: Cursor, network: str) -> list[str]:
    cur.execute("SELECT address FROM deposit_addresses WHERE network = %s ORDER BY address",
                (network,))
    return [row[0] for row in cur.fetchall()]


def token_balance(rpc: ChainRpc, token: str, owner: str, block: int) -> int:
    """balanceOf(owner) at `block`; a contract that does not answer holds nothing."""
    answer = rpc.call(token, BALANCE_OF_CALL + owner[2:].rjust(64, "0"), block)
    if answer is None or len(answer) < 3:
        return 0
    return int(answer, 16)


def reconcile(cur: Cursor, rpc: ChainRpc, block: int) -> ChainReport:
    """Every deposit address of the rpc's network at `block` (RpcError if the node
    cannot answer: no partial verdict)."""
    network = rpc.network
    report = ChainReport(network, block)
    held = books(cur, network, block)
    # Every token the network's deposits were ever in, read at every address: a token
    # transfer never credited to an address that holds none on the books is a surplus.
    tokens = {e.asset: BookEntry(e.asset, e.token_contract, e.decimals, 0)
              for entries in held.values() for e in entries if e.token_contract}
    native = BookEntry(deposit_asset(network, None), None, NATIVE_DECIMALS, 0)
    for address in addresses(cur, network):
        report.addresses += 1
        mine = {e.asset: e for e in held.get(address, ())}
        for entry in (native, *sorted(tokens.values(), key=lambda e: e.asset)):
            books_raw = mine.get(entry.asset, entry).raw
            on_chain = (rpc.balance(address, block) if entry.token_contract is None
                        else token_balance(rpc, entry.token_contract, address, block))
            report.holdings.append(Holding(network, address, entry.asset, entry.decimals,
                                           books_raw, on_chain))
    return report


def record(report: ChainReport, now: float) -> None:
    """The report as the scheduled run's metrics."""
    SHORTFALL.labels(report.network).set(report.count("shortfall"))
    SURPLUS.labels(report.network).set(report.count("surplus"))
    CHECKED_BLOCK.labels(report.network).set(report.block)
    LAST_RUN.labels(report.network).set(now)


def format_report(report: ChainReport) -> str:
    """One line when the chain agrees with the books, else a table of the holdings that
    do not."""
    head = (f"reconcile --chain: {report.network} at block {report.block}: "
            f"{report.addresses} deposit addresses, {len(report.holdings)} holdings")
    problems = report.problems
    if not problems:
        return head + ": ok, the chain holds what the books say"
    table = format_table(
        ("address", "asset", "books", "on_chain", "difference", "problem"),
        [(h.address, h.asset, format_amount(h.amount(h.books)),
          format_amount(h.amount(h.on_chain)), signed(h.amount(h.on_chain - h.books)),
          str(h.problem)) for h in problems],
        right_aligned={2, 3, 4}, rule=True)
    return (f"{head}: {report.count('shortfall')} SHORTFALL(S), "
            f"{report.count('surplus')} SURPLUS(ES)\n{table}")


def networks_report(reports: Sequence[ChainReport]) -> tuple[str, bool]:
    """The reports' text, and whether every one is clean."""
    return ("\n".join(format_report(r) for r in reports),
            all(not r.problems for r in reports))
