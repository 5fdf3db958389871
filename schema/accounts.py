"""The accounts of the double-entry ledger (table `accounts`, migration 0008).

An account is named by (kind, owner, asset) and known to postings by its id. Users have
three per asset (available, pending, held: the balances row is their derived copy); the
platform has the counter-accounts every transfer balances against. Which event posts to
which account is consumers/ledger/postings.py's rule.

Each kind is declared once (declare_kind, below): a new platform kind is that line, and
the migrator makes accounts.kind's CHECK allow exactly the declared kinds (schema/
migrate.py, sync_account_kinds), so it needs no numbered migration.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, ClassVar, NamedTuple

from paystream.schema.db import Cursor
from paystream.schema.pgarray import text_array

# Every declared kind by its name, in declaration order (declare_kind, retract_kind).
_KINDS: dict[str, AccountKind] = {}


class _Kinds(type):
    """AccountKind's class: the declared kinds, walked in declaration order."""

    def __iter__(cls) -> Iterator[AccountKind]:
        return iter(list(_KINDS.values()))

    def __len__(cls) -> int:
        return len(_KINDS)


class AccountKind(str, metaclass=_Kinds):
    """A declared account kind: its name (a `str`, as the enum it replaces was). Adding
    one is a declare_kind below, nothing more: the migrator keeps accounts.kind's CHECK
    equal to the declared names (schema/migrate.py, sync_declared_checks)."""

    AVAILABLE: ClassVar[AccountKind]    # spendable (balances.balance)
    PENDING: ClassVar[AccountKind]      # chain deposits before finality (balances.pending)
    HELD: ClassVar[AccountKind]         # withdrawals in flight (balances.held)
    CUSTODY: ClassVar[AccountKind]      # what the deposit addresses of a network hold
    SETTLEMENT: ClassVar[AccountKind]   # what a payment gateway owes (or is owed)
    FEES: ClassVar[AccountKind]         # fees the platform earned
    RECEIVABLE: ClassVar[AccountKind]   # reversals available funds could not cover
    OPENING: ClassVar[AccountKind]      # balances carried over from the v1 journal
    ADJUSTMENTS: ClassVar[AccountKind]  # operator adjustments

    value: str
    name: str
    is_user: bool  # one of a user's three (USER_KINDS); the rest are the platform's

    def __new__(cls, value: str) -> AccountKind:
        """The declared kind named `value` (as an enum's lookup)."""
        found = _KINDS.get(value)
        if found is None:
            raise ValueError(f"{value!r} is not a declared account kind")
        return found

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"an account kind is fixed where it is declared ({name})")

    def __repr__(self) -> str:
        return f"AccountKind({self.value!r})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (AccountKind, (self.value,))


def declare_kind(name: str, *, user: bool = False) -> AccountKind:
    """Declare the account kind `name` (the platform's unless `user`)."""
    assert name.isidentifier() and name.islower(), f"account kind {name!r}: [a-z0-9_]"
    assert name not in _KINDS, f"account kind {name!r} is declared twice"
    kind = str.__new__(AccountKind, name)
    kind.__dict__.update(value=name, name=name.upper(), is_user=user)
    _KINDS[name] = kind
    type.__setattr__(AccountKind, kind.name, kind)
    return kind


def retract_kind(kind: AccountKind) -> None:
    """Forget a declared kind: for a test that declares one for its own duration."""
    del _KINDS[kind.value]
    type.__delattr__(AccountKind, kind.name)


# In this order in accounts.kind's CHECK. A user's three (owner = the user id):
declare_kind("available", user=True)
declare_kind("pending", user=True)
declare_kind("held", user=True)
# The platform's: per network (owner = network), per provider (owner = provider), and
# the singletons (owner = PLATFORM).
declare_kind("custody")
declare_kind("settlement")
declare_kind("fees")
declare_kind("receivable")
declare_kind("opening")
declare_kind("adjustments")


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
