"""Driving the ledger handler directly, inside one transaction, as the consumer does."""

from __future__ import annotations

from paystream.consumers.commit import apply_with_isolation
from paystream.consumers.handler import BatchResult
from paystream.consumers.ledger import LedgerHandler
from paystream.consumers.records import Record
from paystream.schema.db import Connection


def ledger_apply(conn: Connection, records: list[Record]) -> BatchResult:
    """One batch through the ledger, as the commit protocol's steps 1, 2 and 5 run it."""
    try:
        result = apply_with_isolation(conn, LedgerHandler(), records)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return result
