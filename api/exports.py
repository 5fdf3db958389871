"""A merchant's own books as CSV (GET /v1/exports/postings|transfers|invoices): the
operator's `paystream export` (statements/export.py) for one merchant. Postgres writes
the rows (`COPY (query) TO STDOUT`) in the request's read snapshot, after the key check
that set the merchant: the queries read accounts, events and invoices, whose tenancy
policies (migration 0033) admit only the merchant's users' rows. The CSV is spooled to
a temporary file (in memory up to SPOOL_BYTES) and streamed from there, so the database
thread is free again before the client has read it all."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import IO

from paystream.edge.errors import InvalidRequestError
from paystream.schema.accounts import USER_KINDS
from paystream.schema.db import Cursor

MAX_RANGE = timedelta(days=31)
EXPORT_TIMEOUT_MS = 60_000  # an export may read for longer than a route's 2 s
SPOOL_BYTES = 8 << 20
USER_BOOKS = "ARRAY[" + ", ".join(f"'{k.value}'" for k in USER_KINDS) + "]"


@dataclass(frozen=True)
class Shape:
    query: str  # with %(start)s and %(end)s
    header: str


SHAPES: dict[str, Shape] = {
    # Each posting to one of the merchant's users' books (the other leg, a provider's or
    # the platform's account, is not the merchant's).
    "postings": Shape(
        "SELECT p.transfer_id, t.created_at, t.source_event_id, t.event_type, a.owner,"
        " a.kind, p.asset, p.amount FROM accounts a"
        " JOIN postings p ON p.account_id = a.account_id"
        " JOIN transfers t ON t.transfer_id = p.transfer_id"
        f" WHERE a.kind = ANY({USER_BOOKS}) AND t.created_at >= %(start)s"
        " AND t.created_at < %(end)s ORDER BY p.transfer_id, a.account_id",
        "transfer_id,created_at,event_id,event_type,user_id,book,asset,amount"),
    # Each transfer that touched one of the merchant's users, with its event.
    "transfers": Shape(
        "SELECT t.transfer_id, t.created_at, t.source_event_id, t.event_type, e.provider,"
        " e.user_id, e.asset, e.amount, e.trace_id FROM transfers t"
        " JOIN payment_events e ON e.event_id = t.source_event_id"
        " WHERE t.created_at >= %(start)s AND t.created_at < %(end)s"
        " ORDER BY t.transfer_id",
        "transfer_id,created_at,event_id,event_type,provider,user_id,asset,event_amount,"
        "trace_id"),
    "invoices": Shape(
        "SELECT invoice_id, user_id, order_id, asset, amount, state, additional_status,"
        " amount_paid, amount_pending, created_at, expires_at FROM invoices"
        " WHERE created_at >= %(start)s AND created_at < %(end)s"
        " ORDER BY created_at, invoice_id",
        "invoice_id,user_id,order_id,asset,amount,state,additional_status,amount_paid,"
        "amount_pending,created_at,expires_at"),
}


def check_range(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """[start, end) in UTC: Postgres refuses offsets beyond 15:59 that ISO 8601 allows
    (a refused one was a 500), and a moment before year 1 in UTC is out of range."""
    if start.tzinfo is None or end.tzinfo is None:
        raise InvalidRequestError("from and to need a UTC offset (e.g. Z)",
                                  code="invalid_range")
    try:
        start, end = start.astimezone(UTC), end.astimezone(UTC)
    except OverflowError:
        raise InvalidRequestError("from or to is out of range", code="invalid_range") from None
    if not (start < end and end - start <= MAX_RANGE):
        raise InvalidRequestError(f"to must be after from, by at most {MAX_RANGE.days} days",
                                  code="invalid_range")
    return start, end


def spool(cur: Cursor, kind: str, start: datetime, end: datetime) -> IO[bytes]:
    """The CSV of `kind` in [start, end), header first, in a temporary file at its
    start (the caller closes it)."""
    shape = SHAPES[kind]
    cur.execute(f"SET LOCAL statement_timeout = {EXPORT_TIMEOUT_MS};"
                " SET LOCAL TimeZone = 'UTC'")
    query = cur.mogrify(shape.query, {"start": start, "end": end}).decode()
    # Handed to the answer, which closes it when streamed (routes_exports._chunks).
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115
    try:
        out.write(shape.header.encode() + b"\n")
        cur.copy_expert(f"COPY ({query}) TO STDOUT (FORMAT csv)", out, size=1 << 20)
        out.seek(0)
    except BaseException:
        out.close()
        raise
    return out
