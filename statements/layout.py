"""The statement file's layout (docs/statements.md): a header line naming at least
`id,type,amount,fee,net,currency,created,available_on,payout_id,reference` in any order,
then one balance transaction per line. Columns beyond those are kept, not refused.

Parsing is strict and pure (no I/O but the rows it is given): the first malformed line
raises StatementFormatError naming its line number and why, and the importer then writes
nothing. Amounts are signed decimal strings (a refund's and a payout's are negative),
checked as text and by Decimal, never through a float; `net` must be `amount - fee`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import NamedTuple

import orjson

from paystream.schema.amounts import EXACT_CONTEXT
from paystream.schema.events import ASSET_PATTERN, EVENT_ID_PATTERN

COLUMNS = ("id", "type", "amount", "fee", "net", "currency", "created", "available_on",
           "payout_id", "reference")
LINE_TYPES = ("payment", "refund", "chargeback", "fee", "payout")
# NUMERIC(38,18): 20 digits before the point, 18 after; a sign, no exponent or spaces.
SIGNED_AMOUNT = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,18})?")
ID_PATTERN = EVENT_ID_PATTERN  # printable ASCII without spaces, 1-200 characters
MAX_EXTRA_LENGTH = 2000  # one extra cell; a statement is a finance export, not a blob


class StatementFormatError(ValueError):
    """A statement file that does not follow the layout: `line` is its 1-based line
    number in the file (1 is the header; 0 the file as a whole)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}" if line else reason)
        self.line = line
        self.reason = reason


Fail = Callable[[str], StatementFormatError]  # an error naming the line being parsed


@dataclass(frozen=True)
class Header:
    """Where each documented column is, and the extra columns' names and places."""

    positions: tuple[int, ...]  # of COLUMNS, in that order
    extras: tuple[tuple[str, int], ...]
    width: int

    @classmethod
    def parse(cls, names: Sequence[str]) -> Header:
        cleaned = [n.strip() for n in names]
        seen: set[str] = set()
        for name in cleaned:
            if not name:
                raise StatementFormatError(1, "the header has an empty column name")
            if name in seen:
                raise StatementFormatError(1, f"the header names {name[:80]!r} twice")
            seen.add(name)
        missing = [c for c in COLUMNS if c not in seen]
        if missing:
            raise StatementFormatError(1, f"the header lacks {', '.join(missing)} (the layout:"
                                          f" {','.join(COLUMNS)})")
        return cls(positions=tuple(cleaned.index(c) for c in COLUMNS),
                   extras=tuple((n, i) for i, n in enumerate(cleaned) if n not in COLUMNS),
                   width=len(cleaned))


class Line(NamedTuple):
    """One parsed line; `row` is what COPY writes (statements/importer.py's temporary
    table, in its column order): the validated texts as the file spelled them, so an
    amount is never converted on its way to NUMERIC."""

    line_no: int
    line_id: str
    type: str
    amount: Decimal
    fee: Decimal
    net: Decimal
    currency: str
    created: datetime
    available_on: datetime | None
    payout_id: str | None
    reference: str | None
    extra: dict[str, str]
    row: tuple[object, ...]


def parse_lines(rows: Iterable[tuple[int, Sequence[str]]]) -> Iterator[Line]:
    """(line number, cells) rows, header first, as parsed Lines; blank lines skipped."""
    header: Header | None = None
    for line_no, cells in rows:
        if not cells or (len(cells) == 1 and not cells[0].strip()):
            continue
        if header is None:
            header = Header.parse(cells)
            continue
        yield parse_line(header, line_no, cells)
    if header is None:
        raise StatementFormatError(0, "the file is empty: it needs a header line")


def parse_line(header: Header, line_no: int, cells: Sequence[str]) -> Line:
    if len(cells) != header.width:
        raise StatementFormatError(line_no, f"{len(cells)} columns where the header has "
                                            f"{header.width}")
    (line_id, kind, amount, fee, net, currency, created, available_on, payout_id,
     reference) = (cells[i] for i in header.positions)

    def fail(reason: str) -> StatementFormatError:
        return StatementFormatError(line_no, reason)

    if ID_PATTERN.fullmatch(line_id) is None:
        raise fail(f"id {line_id[:80]!r} is not 1-200 printable characters without spaces")
    if kind not in LINE_TYPES:
        raise fail(f"type must be one of {', '.join(LINE_TYPES)}, got {kind[:40]!r}")
    value, charged, rest = (_amount(name, text, fail) for name, text in
                            (("amount", amount), ("fee", fee), ("net", net)))
    if rest != EXACT_CONTEXT.subtract(value, charged):  # exact: no context switch per line
        raise fail(f"net {net} is not amount - fee ({amount} - {fee})")
    if ASSET_PATTERN.fullmatch(currency) is None:
        raise fail(f"currency {currency[:80]!r} is not a valid currency code")
    moment = _created(created, fail)
    later = _moment("available_on", available_on, fail, required=False)
    payout, ref = (_optional_id("payout_id", payout_id, fail),
                   _optional_id("reference", reference, fail))
    extra = _extras(header, cells, fail) if header.extras else {}
    row = (line_no, line_id, kind, amount, fee, net, currency, _zoned(created, moment),
           None if later is None else _zoned(available_on, later), payout, ref,
           orjson.dumps(extra).decode() if extra else "{}")
    return Line(line_no, line_id, kind, value, charged, rest, currency, moment, later,
                payout, ref, extra, row)


def _zoned(text: str, moment: datetime) -> str:
    """The time as the file wrote it when it names its offset, else in UTC."""
    return text if text[-1] == "Z" or text[-6] in "+-" else moment.isoformat()


def _amount(name: str, text: str, fail: Fail) -> Decimal:
    if SIGNED_AMOUNT.fullmatch(text) is None:
        raise fail(f"{name} {text[:40]!r} is not a decimal amount (digits, an optional "
                   "leading minus and up to 18 decimals; no exponent, spaces or separators)")
    return Decimal(text)


def _created(text: str, fail: Fail) -> datetime:
    moment = _moment("created", text, fail, required=True)
    assert moment is not None  # required: None raised
    return moment


def _moment(name: str, text: str, fail: Fail, *, required: bool) -> datetime | None:
    if not text:
        if required:
            raise fail(f"{name} is required (ISO 8601)")
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise fail(f"{name} {text[:40]!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _optional_id(name: str, text: str, fail: Fail) -> str | None:
    if not text:
        return None
    if ID_PATTERN.fullmatch(text) is None:
        raise fail(f"{name} {text[:80]!r} is not 1-200 printable characters"
                   " without spaces")
    return text


def _extras(header: Header, cells: Sequence[str], fail: Fail) -> dict[str, str]:
    extra = {name: cells[i] for name, i in header.extras}
    for name, value in extra.items():
        if len(value) > MAX_EXTRA_LENGTH:
            raise fail(f"column {name[:80]!r} is longer than {MAX_EXTRA_LENGTH} characters")
    return extra
