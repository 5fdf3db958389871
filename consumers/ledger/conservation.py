"""Money is conserved: the double-entry checks `paystream reconcile` adds to the balance
check (consumers/ledger/reconcile.py), each read in the caller's snapshot.

- Every transfer has two or more postings, and they sum to zero per asset; every posting
  names an existing transfer and an account of its own asset (postings have no foreign
  keys, for speed: this is where that is checked). The sum of all postings per asset is
  zero as a consequence, and is reported as such.
- Each custody account (network, asset) holds what the chain deposits of that network
  the ledger holds add up to (recorded, not reorged nor reversed): minus its sum, as
  postings.py posts it. Where the chain is reachable, a `ChainBalances` hook
  compares the custody with what the deposit addresses hold on chain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from paystream.schema.accounts import USER_KINDS, AccountKind
from paystream.schema.db import Cursor, one_row
from paystream.schema.transfers import signed

# (network, asset) -> what the deposit addresses of that network hold on chain, or None
# when this hook cannot tell (an asset it does not read, the chain unreachable).
ChainBalances = Callable[[str, str], Decimal | None]

# Chain deposits in these states are no longer in custody (the chain took them back).
_RELEASED_STATES = ("reorged", "reversed")


@dataclass(frozen=True)
class TransferProblem:
    """A transfer (or, transfer_id None, a whole asset) that breaks double entry."""

    transfer_id: int | None
    asset: str | None
    problem: str  # unbalanced | single_posting | no_transfer | no_account | asset_differs
    detail: str


@dataclass(frozen=True)
class CustodyMismatch:
    network: str
    asset: str
    books: Decimal        # what the custody account says the addresses hold
    deposits: Decimal     # Σ amount of the chain deposits held on that network
    on_chain: Decimal | None = None

    @property
    def problem(self) -> str:
        return "custody_differs" if self.books != self.deposits else "short_on_chain"


def _scope(users: Sequence[str] | None) -> tuple[str, dict[str, object]]:
    """A filter on `p.transfer_id`: the transfers that post to `users`' accounts."""
    if users is None:
        return "", {}
    return (" AND p.transfer_id IN (SELECT q.transfer_id FROM postings q"
            " JOIN accounts a ON a.account_id = q.account_id"
            " WHERE a.owner = ANY(%(users)s::text[]) AND a.kind = ANY(%(kinds)s::text[]))",
            {"users": list(users), "kinds": [k.value for k in USER_KINDS]})


def count_transfers(cur: Cursor, users: Sequence[str] | None = None) -> int:
    """Transfers in scope: all, or those posting to `users`' accounts."""
    scope, params = _scope(users)
    cur.execute("SELECT count(DISTINCT p.transfer_id) FROM postings p WHERE true" + scope,
                params)
    return int(one_row(cur)[0])


def find_transfer_problems(cur: Cursor, users: Sequence[str] | None = None
                           ) -> list[TransferProblem]:
    """Transfers (all, or those posting to `users`' accounts) that do not balance, have
    one posting, or post to nothing real."""
    scope, params = _scope(users)
    found: list[TransferProblem] = []
    cur.execute("SELECT p.transfer_id, p.asset, sum(p.amount) FROM postings p WHERE true"
                + scope + " GROUP BY p.transfer_id, p.asset HAVING sum(p.amount) <> 0"
                " ORDER BY 1, 2", params)
    found += [TransferProblem(t, a, "unbalanced", f"postings sum to {signed(total)}")
              for t, a, total in cur.fetchall()]
    cur.execute("SELECT p.transfer_id, min(p.asset) FROM postings p WHERE true" + scope
                + " GROUP BY p.transfer_id HAVING count(*) < 2 ORDER BY 1", params)
    found += [TransferProblem(t, a, "single_posting", "a transfer needs two postings")
              for t, a in cur.fetchall()]
    cur.execute(
        "SELECT p.transfer_id, p.asset, p.account_id, t.transfer_id IS NULL,"
        " a.account_id IS NULL, a.asset FROM postings p"
        " LEFT JOIN transfers t ON t.transfer_id = p.transfer_id"
        " LEFT JOIN accounts a ON a.account_id = p.account_id"
        " WHERE (t.transfer_id IS NULL OR a.account_id IS NULL OR a.asset <> p.asset)"
        + scope + " ORDER BY 1, 3", params)
    for t, asset, account_id, no_transfer, no_account, account_asset in cur.fetchall():
        if no_transfer:
            found.append(TransferProblem(t, asset, "no_transfer",
                                         f"posting to account {account_id}"))
        elif no_account:
            found.append(TransferProblem(t, asset, "no_account",
                                         f"account {account_id} does not exist"))
        else:
            found.append(TransferProblem(t, asset, "asset_differs",
                                         f"account {account_id} is in {account_asset}"))
    return found


def unbalanced_assets(cur: Cursor) -> list[TransferProblem]:
    """Assets whose postings, all of them, do not sum to zero (a scan of postings)."""
    cur.execute("SELECT asset, sum(amount) FROM postings GROUP BY asset"
                " HAVING sum(amount) <> 0 ORDER BY asset")
    return [TransferProblem(None, a, "asset_not_zero", f"all postings sum to {signed(total)}")
            for a, total in cur.fetchall()]


def find_custody_mismatches(cur: Cursor, chain: ChainBalances | None = None
                            ) -> list[CustodyMismatch]:
    """Custody accounts out of line with the chain deposits held (and, through `chain`,
    with what the deposit addresses hold: less on chain than on the books is a
    mismatch; more is not, an address may hold what was never a deposit)."""
    cur.execute(
        "WITH books AS ("
        "  SELECT a.owner AS network, a.asset, -coalesce(sum(p.amount), 0) AS held"
        "  FROM accounts a LEFT JOIN postings p ON p.account_id = a.account_id"
        "  WHERE a.kind = %s GROUP BY a.owner, a.asset"
        "), deposits AS ("
        "  SELECT network, asset, sum(amount) AS total FROM chain_deposits"
        "  WHERE state <> ALL(%s) GROUP BY network, asset"
        ") SELECT network, asset, coalesce(b.held, 0), coalesce(d.total, 0)"
        " FROM books b FULL JOIN deposits d USING (network, asset) ORDER BY 1, 2",
        (AccountKind.CUSTODY.value, list(_RELEASED_STATES)))
    found: list[CustodyMismatch] = []
    for network, asset, books, deposits in cur.fetchall():
        on_chain = chain(network, asset) if chain is not None else None
        if books != deposits or (on_chain is not None and on_chain < books):
            found.append(CustodyMismatch(network, asset, books, deposits, on_chain))
    return found
