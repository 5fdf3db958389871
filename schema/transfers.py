"""Transfers and their postings: the ledger's journal (migration 0008).

A transfer is one event's effect on the books: two or more postings, one per account,
summing to zero per asset. `write` is the only writer (the ledger, in its batch
transaction); the readers below serve reconcile, `paystream balances --at` and the
chaos run's invariants.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import NamedTuple

from paystream.schema.accounts import USER_KINDS, AccountKind
from paystream.schema.amounts import format_amount
from paystream.schema.db import Cursor
from paystream.schema.pgcopy import copy_rows, copy_text


class NewTransfer(NamedTuple):
    """A transfer to write: its source event and (account id, asset, signed amount)s (a
    tuple: the ledger builds one per event that moves money)."""

    source_event_id: str
    event_type: str
    postings: Sequence[tuple[int, str, Decimal]]


def write(cur: Cursor, transfers: Sequence[NewTransfer]) -> None:
    """Write `transfers` in the caller's transaction: their ids in one nextval() query,
    then both tables by COPY (the fastest bulk write measured, pgcopy.py).
    transfers' UNIQUE (source_event_id, event_type) refuses a second effect of an event
    whatever the callers above got wrong."""
    if not transfers:
        return
    cur.execute("SELECT nextval('transfers_transfer_id_seq') FROM generate_series(1, %s)",
                (len(transfers),))
    ids = [row[0] for row in cur.fetchall()]
    copy_rows(cur, "COPY transfers (transfer_id, source_event_id, event_type) FROM STDIN",
              (f"{tid}\t{copy_text(t.source_event_id)}\t{t.event_type}\n"
               for tid, t in zip(ids, transfers, strict=True)))
    copy_rows(cur, "COPY postings (transfer_id, account_id, asset, amount) FROM STDIN",
              (f"{tid}\t{account_id}\t{copy_text(asset)}\t{sql_amount(amount)}\n"
               for tid, t in zip(ids, transfers, strict=True)
               for account_id, asset, amount in t.postings))


def signed(amount: Decimal) -> str:
    """A signed amount in canonical form, for people (format_amount takes magnitudes)."""
    return format_amount(amount) if amount >= 0 else "-" + format_amount(-amount)


def sql_amount(amount: Decimal) -> str:
    """A signed amount as plain decimal text for SQL and COPY: what NUMERIC reads back
    exactly, a third of signed()'s cost on the ledger's hot path (no trailing-zero
    stripping: that canonical form is for hashes and people)."""
    return format(amount, "f")


# (user_id, asset, kind) -> the sum of that user account's postings.
UserBooks = dict[tuple[str, str, AccountKind], Decimal]


def user_books(cur: Cursor, users: Sequence[str], at: str | None = None) -> UserBooks:
    """The postings' sum of every account of `users` (accounts without postings absent),
    counting only transfers created at or before `at` (a timestamp Postgres reads) when
    it is given. Read in `cur`'s transaction."""
    time_filter = "" if at is None else " AND t.created_at <= %(at)s::timestamptz"
    join = "" if at is None else " JOIN transfers t ON t.transfer_id = p.transfer_id"
    cur.execute(
        "SELECT a.owner, a.asset, a.kind, sum(p.amount) FROM accounts a"
        " JOIN postings p ON p.account_id = a.account_id" + join +
        " WHERE a.owner = ANY(%(users)s::text[]) AND a.kind = ANY(%(kinds)s::text[])"
        + time_filter + " GROUP BY a.owner, a.asset, a.kind",
        {"users": list(users), "kinds": [k.value for k in USER_KINDS], "at": at})
    return {(u, a, AccountKind(k)): total for u, a, k, total in cur.fetchall()}
