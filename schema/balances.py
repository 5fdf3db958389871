"""A balance row's key: one balance per (user, asset), never one number for two assets."""

from __future__ import annotations

from typing import TypeAlias

# (user_id, asset): the primary key of balances, and of the journals' per-balance sums.
# A plain tuple (not a NamedTuple): the ledger builds one per event on its hot path.
BalanceKey: TypeAlias = tuple[str, str]
