"""`paystream export`: the books for finance's spreadsheets, in constant memory, from
one consistent snapshot (a REPEATABLE READ, read-only transaction).

Postgres writes the rows itself (`COPY (query) TO STDOUT`, the fastest way out, and a
stream: no row is held by Python). CSV goes straight to the file; for Parquet a thread
feeds that stream through a pipe into pyarrow's incremental CSV reader, whose batches
(a few MB each) become the Parquet file's row groups, typed: amounts decimal(38,18),
times UTC timestamps. Each kind carries the account, user, provider and event
references a spreadsheet needs; rows are in the range [--from, --to) of their time.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from paystream.operator_cli import database
from paystream.schema.db import Connection

KINDS = ("postings", "transfers", "invoices", "statements")
# Column types, as names: pyarrow is imported only by a Parquet export (`paystream
# --help` and every other command stay light).
TEXT, INT, MONEY, TIME = "text", "int", "money", "time"
BLOCK_BYTES = 4 << 20  # pyarrow's read block: a batch, a Parquet row group


class ExportError(ValueError):
    """An export that cannot run as asked (the range, the output); says why."""


@dataclass(frozen=True)
class Shape:
    query: str  # with %(start)s and %(end)s
    columns: tuple[tuple[str, str], ...]


SHAPES: dict[str, Shape] = {
    "postings": Shape(
        "SELECT p.transfer_id, t.created_at, t.source_event_id, t.event_type, e.provider,"
        " p.account_id, a.kind, a.owner,"
        " u.user_id, u.merchant_id, p.asset, p.amount"
        " FROM transfers t JOIN postings p ON p.transfer_id = t.transfer_id"
        " JOIN accounts a ON a.account_id = p.account_id"
        " LEFT JOIN users u ON u.user_id = a.owner"
        "  AND a.kind IN ('available', 'pending', 'held')"
        " LEFT JOIN payment_events e ON e.event_id = t.source_event_id"
        " WHERE t.created_at >= %(start)s AND t.created_at < %(end)s"
        " ORDER BY p.transfer_id, p.account_id",
        (("transfer_id", INT), ("created_at", TIME), ("event_id", TEXT),
         ("event_type", TEXT), ("provider", TEXT), ("account_id", INT),
         ("account_kind", TEXT), ("account_owner", TEXT), ("user_id", TEXT),
         ("merchant_id", TEXT), ("asset", TEXT), ("amount", MONEY))),
    "transfers": Shape(
        "SELECT t.transfer_id, t.created_at, t.source_event_id, t.event_type, e.provider,"
        " e.user_id, u.merchant_id, e.asset, e.amount, e.trace_id"
        " FROM transfers t LEFT JOIN payment_events e ON e.event_id = t.source_event_id"
        " LEFT JOIN users u ON u.user_id = e.user_id"
        " WHERE t.created_at >= %(start)s AND t.created_at < %(end)s"
        " ORDER BY t.transfer_id",
        (("transfer_id", INT), ("created_at", TIME), ("event_id", TEXT),
         ("event_type", TEXT), ("provider", TEXT), ("user_id", TEXT), ("merchant_id", TEXT),
         ("asset", TEXT), ("event_amount", MONEY), ("trace_id", TEXT))),
    "invoices": Shape(
        "SELECT i.invoice_id, i.user_id, u.merchant_id, i.api_key_id, i.order_id, i.asset,"
        " i.amount, i.state, i.additional_status, i.amount_paid, i.amount_pending,"
        " i.created_at, i.expires_at FROM invoices i JOIN users u USING (user_id)"
        " WHERE i.created_at >= %(start)s AND i.created_at < %(end)s"
        " ORDER BY i.created_at, i.invoice_id",
        (("invoice_id", TEXT), ("user_id", TEXT), ("merchant_id", TEXT),
         ("merchant_key_id", TEXT),
         ("order_id", TEXT), ("asset", TEXT), ("amount", MONEY), ("state", TEXT),
         ("additional_status", TEXT), ("amount_paid", MONEY), ("amount_pending", MONEY),
         ("created_at", TIME), ("expires_at", TIME))),
    "statements": Shape(
        "SELECT l.statement_id, l.line_no, l.line_id, l.type, l.amount, l.fee, l.net,"
        " l.currency, l.created, l.available_on, l.payout_id, l.reference, e.event_id,"
        " e.user_id, u.merchant_id, coalesce(k.result, 'matched'), coalesce(k.detail, '')"
        " FROM statement_lines l"
        " LEFT JOIN statement_matches k ON k.statement_id = l.statement_id"
        "  AND k.line_no = l.line_no"
        # No result row: the line matched the event its reference names.
        " LEFT JOIN payment_events e ON e.event_id = CASE WHEN k.match_id IS NULL"
        "  THEN l.reference ELSE k.event_id END"
        " LEFT JOIN users u ON u.user_id = e.user_id"
        " WHERE l.created >= %(start)s AND l.created < %(end)s"
        " ORDER BY l.statement_id, l.line_no",
        (("statement_id", INT), ("line_no", INT), ("line_id", TEXT), ("type", TEXT),
         ("amount", MONEY), ("fee", MONEY), ("net", MONEY), ("currency", TEXT),
         ("created", TIME), ("available_on", TIME), ("payout_id", TEXT),
         ("reference", TEXT), ("event_id", TEXT), ("user_id", TEXT),
         ("merchant_id", TEXT), ("result", TEXT),
         ("detail", TEXT))),
}


def export(kind: str, start: datetime, end: datetime, fmt: str, output: Path | None) -> int:
    """Write `kind` rows of [start, end) as `fmt` to `output` (stdout: CSV only); return
    how many rows were written."""
    if end <= start:
        raise ExportError(f"--to {end.isoformat()} is not after --from {start.isoformat()}")
    shape = SHAPES[kind]
    with database("paystream-export") as conn:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:
            cur.execute("SET LOCAL TimeZone = 'UTC'")
            copy = cur.mogrify(shape.query, {"start": start, "end": end}).decode()
        if fmt == "csv":
            return _csv(conn, copy, shape, output)
        assert output is not None
        return write_parquet(conn, copy, shape, output)


def _csv(conn: Connection, query: str, shape: Shape, output: Path | None) -> int:
    with conn.cursor() as cur:
        header = ",".join(name for name, _ in shape.columns)
        sink: IO[bytes] = sys.stdout.buffer if output is None else output.open("wb")
        try:
            sink.write(header.encode() + b"\n")
            cur.copy_expert(f"COPY ({query}) TO STDOUT (FORMAT csv)", sink, size=1 << 20)
        finally:
            if output is not None:
                sink.close()
        return max(cur.rowcount, 0)


def write_parquet(conn: Connection, query: str, shape: Shape, output: Path) -> int:
    """COPY's CSV through a pipe into pyarrow, batch by batch, into a Parquet file."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    types: dict[str, pa.DataType] = {
        TEXT: pa.string(), INT: pa.int64(), MONEY: pa.decimal128(38, 18),
        TIME: pa.timestamp("us", tz="UTC")}
    columns = [(name, types[kind]) for name, kind in shape.columns]
    read_end, write_end = os.pipe()
    failure: list[BaseException] = []

    def produce() -> None:
        with os.fdopen(write_end, "wb", buffering=1 << 20) as sink, conn.cursor() as cur:
            try:
                cur.copy_expert(f"COPY ({query}) TO STDOUT (FORMAT csv)", sink, size=1 << 20)
            except BaseException as exc:  # re-raised below, in the caller's thread
                failure.append(exc)

    producer = threading.Thread(target=produce, name="export-copy", daemon=True)
    producer.start()
    schema = pa.schema(columns)
    rows = 0
    with os.fdopen(read_end, "rb") as source:
        reader = pa_csv.open_csv(
            source, read_options=pa_csv.ReadOptions(column_names=[n for n, _ in columns],
                                                    block_size=BLOCK_BYTES),
            # COPY writes NULL unquoted and empty, an empty text quoted: only NULL is null.
            convert_options=pa_csv.ConvertOptions(
                column_types=dict(columns), strings_can_be_null=True,
                quoted_strings_can_be_null=False))
        with pq.ParquetWriter(output, schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(batch)
                rows += batch.num_rows
    producer.join()
    if failure:
        raise failure[0]
    return rows
