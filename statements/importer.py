"""A statement file into the database, whole or not at all, once per file.

In the caller's transaction: the file's SHA-256 first (the same bytes again change
nothing), then its lines parsed as they stream into a temporary table by COPY (constant
memory; a malformed line aborts the COPY and the transaction: nothing is half-imported),
line ids checked unique in SQL, the lines copied into statement_lines in one statement,
and the statement matched (statements/matching.py) before the caller commits.
"""

from __future__ import annotations

import csv
import hashlib
import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg2.errors

from paystream.schema.db import Cursor, one_row
from paystream.statements import matching
from paystream.statements.layout import Line, StatementFormatError, parse_lines
from paystream.statements.settings import StatementSettings

COPY_CHUNK = 1 << 16  # bytes of CSV per chunk handed to COPY: few round trips, little memory
_STAGE = """
CREATE TEMPORARY TABLE statement_in (
    line_no BIGINT, line_id TEXT, type TEXT, amount NUMERIC(38, 18), fee NUMERIC(38, 18),
    net NUMERIC(38, 18), currency TEXT, created TIMESTAMPTZ, available_on TIMESTAMPTZ,
    payout_id TEXT, reference TEXT, extra JSONB
) ON COMMIT DROP
"""


@dataclass(frozen=True)
class Imported:
    statement_id: int
    new: bool  # False: the same file was imported before (nothing changed)
    lines: int
    import_s: float = 0.0  # parse, COPY and lines written
    match_s: float = 0.0


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def import_statement(cur: Cursor, path: Path, *, provider: str, actor: str,
                     settings: StatementSettings) -> Imported:
    """Import and match `path`; StatementFormatError (nothing written) on a bad line."""
    started = time.monotonic()
    digest = file_sha256(path)
    cur.execute("SELECT statement_id, line_count FROM statements"
                " WHERE provider = %s AND file_sha256 = %s", (provider, digest))
    known = cur.fetchone()
    if known is not None:
        return Imported(known[0], new=False, lines=known[1])
    cur.execute("SET LOCAL work_mem = %s", (matching.WORK_MEM,))
    cur.execute(_STAGE)
    with path.open("rb") as raw:
        source = _CopySource(parse_lines(_rows(raw)))
        try:
            cur.copy_expert("COPY statement_in FROM STDIN (FORMAT csv)", source,
                            size=COPY_CHUNK)
        except psycopg2.errors.QueryCanceled:
            # psycopg2 reports an error raised by read() as a cancelled COPY.
            if source.error is not None:
                raise source.error from None
            raise
    _refuse_repeated_ids(cur)
    cur.execute(
        "INSERT INTO statements (provider, file_sha256, file_name, extra_columns, line_count,"
        " period_start, period_end, imported_by)"
        " SELECT %s, %s, %s, %s, count(*), min(created), max(created), %s FROM statement_in"
        " RETURNING statement_id, line_count",
        (provider, digest, path.name[:500], _extra_columns(path), actor))
    statement_id, lines = one_row(cur)
    cur.execute("INSERT INTO statement_lines (statement_id, line_no, line_id, type, amount,"
                " fee, net, currency, created, available_on, payout_id, reference, extra)"
                " SELECT %s, line_no, line_id, type, amount, fee, net, currency, created,"
                " available_on, payout_id, reference, extra FROM statement_in",
                (statement_id,))  # in line order already: COPY's
    copied = time.monotonic()
    matching.match(cur, statement_id, provider, settings)
    return Imported(statement_id, new=True, lines=lines, import_s=copied - started,
                    match_s=time.monotonic() - copied)


def _rows(raw: io.BufferedReader) -> Iterator[tuple[int, list[str]]]:
    """(line number, cells) of a UTF-8 CSV file (a BOM allowed); a line that is not
    UTF-8 or not CSV is a StatementFormatError naming it."""
    reader = csv.reader(_text(raw), strict=True)
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise StatementFormatError(reader.line_num, f"not valid CSV: {exc}") from None
        yield reader.line_num, cells


def _text(raw: io.BufferedReader) -> Iterator[str]:
    """The file's lines decoded one by one, so a bad byte is named by its line."""
    for number, data in enumerate(raw, 1):
        try:
            yield data.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            raise StatementFormatError(number, "not UTF-8 text") from None


def _extra_columns(path: Path) -> list[str]:
    """The header's extra column names (the header parsed again: one line)."""
    from paystream.statements.layout import Header

    with path.open("rb") as raw:
        first = next(_rows(raw))[1]  # parse_lines checked it already
    return [name for name, _ in Header.parse(first).extras]


class _CopySource(io.RawIOBase):
    """A file COPY reads: CSV text of the parsed lines, a chunk at a time. A parse
    error raised here aborts the COPY, and psycopg2 raises it to the importer."""

    def __init__(self, lines: Iterator[Line]) -> None:
        self._lines = lines
        self._chunk = _Chunk()
        self._writer = csv.writer(self._chunk, lineterminator="\n")
        self.error: StatementFormatError | None = None

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        chunk, write = self._chunk, self._writer.writerow
        chunk.parts, chunk.size = [], 0
        limit = size if size > 0 else COPY_CHUNK
        try:
            for line in self._lines:
                write(line.row)
                if chunk.size >= limit:
                    break
        except StatementFormatError as exc:
            self.error = exc
            raise
        return "".join(chunk.parts).encode()


class _Chunk:
    """What csv.writer writes to: its pieces and their length (a StringIO's tell() per
    line cost more than the parsing)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def write(self, text: str) -> int:
        self.parts.append(text)
        self.size += len(text)
        return len(text)


def _refuse_repeated_ids(cur: Cursor) -> None:
    """A line id twice in one file: the provider's ids are unique, so the file is bad."""
    cur.execute("SELECT line_id, min(line_no), max(line_no) FROM statement_in"
                " GROUP BY line_id HAVING count(*) > 1 ORDER BY max(line_no) LIMIT 1")
    repeated = cur.fetchone()
    if repeated is not None:
        raise StatementFormatError(repeated[2], f"id {repeated[0]!r} is already on line "
                                                f"{repeated[1]}")
