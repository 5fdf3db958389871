"""What the API reads, each in the request's snapshot (api/database.py `read`): a user's
balances with the caller's key in one statement, an event's status and ledger entries,
a user's history one cursor page at a time, a withdrawal's state. Amounts leave as
canonical strings (schema/transfers.signed)."""

from __future__ import annotations

import re
from typing import Any

from paystream.api import keys
from paystream.edge.errors import InvalidRequestError
from paystream.schema import balances as books
from paystream.schema import processed_events
from paystream.schema.accounts import USER_KINDS
from paystream.schema.amounts import canonical_text
from paystream.schema.db import Cursor, one_row
from paystream.schema.events import EventType
from paystream.schema.idempotency import idempotency_key
from paystream.schema.transfers import signed

USER_BOOKS = [k.value for k in USER_KINDS]
# A cursor is the transfer id a page ended at: a BIGINT, so at most 19 digits.
CURSOR_PATTERN = re.compile(r"[1-9][0-9]{0,18}")
MAX_TRANSFER_ID = 2**63 - 1


# The caller's key, whether the user exists and their balances rows now, in ONE
# statement (migration 0012's api_balances says why a function): the most asked route
# answers in one round trip (api/database.py one_statement). NULLs: no live key, and
# nothing else was read.
BALANCES_WITH_KEY_SQL = ("SELECT key_id, scopes, user_exists, balance_rows"
                         " FROM api_balances(%(key_hash)s, %(user_id)s)")


def balances_with_key(cur: Cursor, key: str, user_id: str
                      ) -> tuple[keys.Caller | None, tuple[bool, list[dict[str, str]]]]:
    """(the live key `key`, or None; (whether the user exists, their balances now, as
    the API answers them))."""
    cur.execute(BALANCES_WITH_KEY_SQL, {"key_hash": keys.key_hash(key), "user_id": user_id})
    key_id, scopes, exists, found = one_row(cur)
    caller = keys.caller(key_id, scopes)
    if caller is None:
        return None, (False, [])
    return caller, (exists, [
        {"asset": asset, "available": canonical_text(available),
         "pending": canonical_text(pending), "held": canonical_text(held)}
        for asset, available, pending, held in found])


def balance_answers(rows: list[books.BalanceRow]) -> list[dict[str, str]]:
    """Balances rows as the API answers them (amounts canonical, never numbers)."""
    return [{"asset": r.asset, "available": signed(r.balance), "pending": signed(r.pending),
             "held": signed(r.held)} for r in rows]


def event(cur: Cursor, event_id: str) -> dict[str, Any] | None:
    """An event's record, its ledger outcome (None until the ledger judged it) and the
    entries it posted to user accounts; None if no such event was received."""
    cur.execute("SELECT event_id, p.event_type, p.user_id, p.asset, p.amount, p.provider,"
                " s.status, p.trace_id, p.received_at, s.status_changed_at"
                " FROM payment_events p JOIN event_status s USING (event_id)"
                " WHERE event_id = %s", (event_id,))
    row = cur.fetchone()
    if row is None:
        return None
    # By its key (its hash index), never by event_id: processed_events has no index on
    # event_id, and the ledger's claim should not pay for one on every insert.
    outcome = processed_events.outcome_of(cur, event_id, row[1])
    cur.execute("SELECT transfer_id, user_id, asset, book, delta, event_type, created_at"
                " FROM user_entries WHERE source_event_id = %s"
                " ORDER BY transfer_id, user_id, asset, book", (event_id,))
    entries = [{"transfer_id": t, "user_id": u, "asset": a, "book": b, "delta": signed(d),
                "event_type": et, "created_at": c} for t, u, a, b, d, et, c in cur.fetchall()]
    return {"event_id": row[0], "event_type": row[1], "user_id": row[2], "asset": row[3],
            "amount": signed(row[4]), "provider": row[5], "status": row[6],
            "outcome": outcome, "trace_id": row[7],
            "received_at": row[8], "status_changed_at": row[9], "entries": entries}


def parse_cursor(cursor: str | None) -> int | None:
    """The transfer id a cursor names (None: the first page); 400 if it is not one."""
    if cursor is None or cursor == "":
        return None
    if CURSOR_PATTERN.fullmatch(cursor) is None or int(cursor) > MAX_TRANSFER_ID:
        raise InvalidRequestError("cursor is not one this API returned", code="invalid_cursor")
    return int(cursor)


def transactions(cur: Cursor, user_id: str, before: int | None, limit: int
                 ) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a user's transfers, newest first: at most `limit` transfers with a
    transfer id below `before`, each with the entries it posted to the user's accounts,
    and the cursor of the next page (None on the last).

    Keyset on transfer_id alone (unique, a BIGSERIAL): a page continues strictly below
    the last id seen, so no transfer is shown twice or skipped among those committed
    before the walk began, however many arrive meanwhile (new ones take higher ids and
    appear on a fresh first page). created_at would need transfer_id as a tie-break
    anyway, and is the transaction's start time, no better an order."""
    # Each account's newest postings below the cursor, at most a page of them, from
    # the end of its (account_id, transfer_id) index range (migration 0017); the page
    # is the newest of their union. A transfer posts to an account at most once
    # (postings' primary key), so no account's top can crowd out a transfer. Then each
    # page transfer's entries, probed by its id: OFFSET 0 keeps that subquery from being
    # merged into a join the planner could drive from the user's accounts instead,
    # reading every posting of the user (it cannot know how many: the account is a
    # join's parameter, so it guesses the average account's).
    cur.execute(
        "WITH page AS (SELECT DISTINCT p.transfer_id FROM accounts a"
        " CROSS JOIN LATERAL (SELECT q.transfer_id FROM postings q"
        "  WHERE q.account_id = a.account_id"
        "  AND (%(before)s::bigint IS NULL OR q.transfer_id < %(before)s::bigint)"
        "  ORDER BY q.transfer_id DESC LIMIT %(limit)s) p"
        " WHERE a.owner = %(user)s AND a.kind = ANY(%(books)s::text[])"
        " ORDER BY p.transfer_id DESC LIMIT %(limit)s)"
        " SELECT e.transfer_id, e.source_event_id, e.event_type, e.created_at, e.asset,"
        " e.book, e.delta FROM page CROSS JOIN LATERAL (SELECT * FROM user_entries u"
        "  WHERE u.transfer_id = page.transfer_id AND u.user_id = %(user)s OFFSET 0) e"
        " ORDER BY e.transfer_id DESC, e.asset, e.book",
        {"user": user_id, "books": USER_BOOKS, "before": before, "limit": limit + 1})
    items: list[dict[str, Any]] = []
    for transfer_id, event_id, event_type, created_at, asset, book, delta in cur.fetchall():
        if not items or items[-1]["transfer_id"] != transfer_id:
            items.append({"transfer_id": transfer_id, "event_id": event_id,
                          "event_type": event_type, "created_at": created_at,
                          "entries": []})
        items[-1]["entries"].append({"asset": asset, "book": book, "delta": signed(delta)})
    if len(items) <= limit:
        return items, None
    items = items[:limit]
    return items, str(items[-1]["transfer_id"])


def withdrawal(cur: Cursor, withdrawal_id: str) -> dict[str, Any] | None:
    """A withdrawal the API requested: its request, its event's status and outcome, and
    its hold (None until the ledger placed it); None if the API requested no such one."""
    cur.execute(
        "SELECT w.withdrawal_id, w.user_id, w.asset, w.amount, w.destination, w.created_at,"
        " s.status, e.trace_id, h.state, h.settled_amount, h.closed_by, h.closed_at,"
        " (SELECT outcome FROM processed_events p WHERE p.idempotency_key = %(key)s)"
        " FROM api_withdrawals w JOIN payment_events e ON e.event_id = w.withdrawal_id"
        " JOIN event_status s ON s.event_id = w.withdrawal_id"
        " LEFT JOIN holds h ON h.hold_id = w.withdrawal_id WHERE w.withdrawal_id = %(id)s",
        {"id": withdrawal_id,
         "key": idempotency_key(withdrawal_id, EventType.WITHDRAWAL_REQUESTED.value)})
    row = cur.fetchone()
    if row is None:
        return None
    (wid, user_id, asset, amount, destination, created_at, event_status, trace_id,
     hold_state, settled_amount, closed_by, closed_at, outcome) = row
    return {"withdrawal_id": wid, "user_id": user_id, "asset": asset,
            "amount": signed(amount), "destination": destination, "created_at": created_at,
            "status": withdrawal_status(event_status, hold_state),
            "event_status": event_status, "outcome": outcome, "hold_state": hold_state,
            "settled_amount": None if settled_amount is None else signed(settled_amount),
            "closed_by": closed_by, "closed_at": closed_at, "trace_id": trace_id}


def withdrawal_status(event_status: str, hold_state: str | None) -> str:
    """One word for a merchant: requested (not yet judged by the ledger), rejected
    (e.g. insufficient funds), dead_lettered, or the hold's state (held, expiring,
    settled, failed, expired)."""
    if hold_state is not None:
        return hold_state
    if event_status in ("rejected", "dead_lettered"):
        return event_status
    return "requested"
