"""The accounts of the double-entry ledger (table `accounts`, migration 0008).

An account is named by (kind, owner, asset) and known to postings by its id. Users have
three per asset (available, pending, held: the balances row is their derived copy); the
platform has the counter-accounts every transfer balances against. Which event posts to
which account is consumers/ledger/postings.py's rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import NamedTuple

from paystream.schema.db import Cursor
from paystream.schema.pgarray import text_array


class AccountKind(StrEnum):
    AVAILABLE = "available"    # spendable (balances.balance)
    PENDING = "pending"        # chain deposits before finality (balances.pending)
    HELD = "held"              # withdrawals in flight (balances.held)
    CUSTODY = "custody"        # what the deposit addresses of a network hold
    SETTLEMENT = "settlement"  # what a payment gateway owes (or is owed)
    FEES = "fees"              # fees the platform earned
    RECEIVABLE = "receivable"  # reversals available funds could not cover (shortfalls)
    OPENING = "opening"        # balances carried over from the v1 single-sided journal
    ADJUSTMENTS = "adjustments"  # operator adjustments

    @property
    def is_user(self) -> bool:
        return self in USER_KINDS


USER_KINDS = (AccountKind.AVAILABLE, AccountKind.PENDING, AccountKind.HELD)
# The owner of the platform's singleton accounts (fees, receivable, ...). The kind tells
# a user's account from the platform's, so a user named `platform` is no confusion.
PLATFORM = "platform"
# Which balances column copies each user account.
BALANCE_COLUMNS: dict[AccountKind, str] = {
    AccountKind.AVAILABLE: "balance", AccountKind.PENDING: "pending",
    AccountKind.HELD: "held"}


class AccountRef(NamedTuple):
    """An account by name: what the ledger plans with before it knows the ids."""

    kind: AccountKind
    owner: str
    asset: str

    @classmethod
    def user(cls, kind: AccountKind, user_id: str, asset: str) -> AccountRef:
        assert kind.is_user
        return cls(kind, user_id, asset)

    @classmethod
    def platform(cls, kind: AccountKind, asset: str) -> AccountRef:
        return cls(kind, PLATFORM, asset)


def resolve(cur: Cursor, refs: Iterable[AccountRef]) -> dict[AccountRef, int]:
    """The id of every account in `refs`, creating the missing ones in the caller's
    transaction (a rollback takes them back with the batch that needed them).

    Looked up first, created only when missing: after warm-up a batch pays one indexed
    query. ON CONFLICT DO NOTHING waits for a concurrent creator and then leaves its row;
    the second SELECT, a new statement, sees it once committed."""
    wanted = sorted(set(refs))
    if not wanted:
        return {}
    found = _lookup(cur, wanted)
    missing = [r for r in wanted if r not in found]
    if missing:
        cur.execute(
            "INSERT INTO accounts (kind, owner, asset)"
            " SELECT k, o, a FROM unnest(%s::text[], %s::text[], %s::text[]) AS x(k, o, a)"
            " ORDER BY k, o, a ON CONFLICT (kind, owner, asset) DO NOTHING",
            _columns(missing))
        found.update(_lookup(cur, missing))
    return found


def _lookup(cur: Cursor, refs: list[AccountRef]) -> dict[AccountRef, int]:
    cur.execute(
        "SELECT a.kind, a.owner, a.asset, a.account_id FROM accounts a"
        " JOIN unnest(%s::text[], %s::text[], %s::text[]) AS x(k, o, s)"
        " ON a.kind = x.k AND a.owner = x.o AND a.asset = x.s", _columns(refs))
    return {AccountRef(AccountKind(k), o, s): account_id
            for k, o, s, account_id in cur.fetchall()}


def _columns(refs: list[AccountRef]) -> tuple[str, str, str]:
    return (text_array([r.kind.value for r in refs]), text_array([r.owner for r in refs]),
            text_array([r.asset for r in refs]))
