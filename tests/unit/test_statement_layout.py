"""The statement CSV parser (statements/layout.py, statements/importer.py's reading):
strict, a malformed line named by its number, extra columns kept, amounts exact."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from paystream.statements.importer import _rows
from paystream.statements.layout import Line, StatementFormatError, parse_lines

HEADER = "id,type,amount,fee,net,currency,created,available_on,payout_id,reference"
GOOD = "txn_1,payment,100.10,3.20,96.90,USD,2026-12-01T10:00:00Z,,po_1,ev-1"


def parse(text: str) -> list[Line]:
    return list(parse_lines(_rows(io.BufferedReader(io.BytesIO(text.encode())))))  # type: ignore[arg-type]


def error(text: str) -> StatementFormatError:
    with pytest.raises(StatementFormatError) as caught:
        parse(text)
    return caught.value


def test_a_line_is_parsed_exactly() -> None:
    (line,) = parse(f"{HEADER}\n{GOOD}\n")
    assert (line.line_no, line.line_id, line.type) == (2, "txn_1", "payment")
    assert (line.amount, line.fee, line.net) == (Decimal("100.10"), Decimal("3.20"),
                                                 Decimal("96.90"))
    assert line.created == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert (line.available_on, line.payout_id, line.reference) == (None, "po_1", "ev-1")


def test_amounts_stay_decimal_to_eighteen_places_and_signed() -> None:
    amount = "-0.123456789012345678"
    (line,) = parse(f"{HEADER}\nr,refund,{amount},0,{amount},USD,2026-12-01,,,\n")
    assert line.amount == Decimal(amount) and str(line.amount) == amount
    assert line.created.tzinfo is UTC  # no offset: UTC, never the machine's zone


def test_extra_columns_are_kept_in_any_order() -> None:
    text = ("note,reference,payout_id,available_on,created,currency,net,fee,amount,type,id,"
            "customer\n"
            '"a, ""quoted"" note",ev-1,,,2026-12-01T10:00:00+01:00,EUR,9,1,10,payment,t,c-9\n')
    (line,) = parse(text)
    assert line.extra == {"note": 'a, "quoted" note', "customer": "c-9"}
    assert (line.line_id, line.amount, line.currency) == ("t", Decimal(10), "EUR")
    assert line.row[-1] == '{"note":"a, \\"quoted\\" note","customer":"c-9"}'
    assert line.row[7] == "2026-12-01T10:00:00+01:00"  # as written: it names its offset


@pytest.mark.parametrize(("bad_line", "reason"), [
    ("txn_2,payment,1e5,0,1e5,USD,2026-12-01,,,", "amount '1e5' is not a decimal amount"),
    ("txn_2,payment,10.5,0.5,10.5,USD,2026-12-01,,,", "net 10.5 is not amount - fee"),
    ("txn_2,payment,1.0000000000000000001,0,1.0000000000000000001,USD,2026-12-01,,,",
     "amount '1.0000000000000000001' is not a decimal amount"),
    ("txn_2,payment, 10,0,10,USD,2026-12-01,,,", "amount ' 10' is not a decimal amount"),
    ("txn_2,transfer,10,0,10,USD,2026-12-01,,,", "type must be one of"),
    ("txn_2,payment,10,0,10,USD,yesterday,,,", "created 'yesterday' is not an ISO 8601"),
    ("txn_2,payment,10,0,10,USD,,,,", "created is required"),
    ("txn 2,payment,10,0,10,USD,2026-12-01,,,", "id 'txn 2' is not 1-200 printable"),
    ("txn_2,payment,10,0,10,U S D,2026-12-01,,,", "currency 'U S D' is not a valid"),
    ("txn_2,payment,10,0,10,USD,2026-12-01,,", "9 columns where the header has 10"),
])
def test_a_malformed_line_is_named_by_its_number(bad_line: str, reason: str) -> None:
    found = error(f"{HEADER}\n{GOOD}\n{bad_line}\n{GOOD.replace('txn_1', 'txn_3')}\n")
    assert found.line == 3 and reason in found.reason, found
    assert str(found).startswith("line 3: ")


def test_a_quoted_field_over_two_lines_counts_both() -> None:
    text = f'{HEADER},note\n{GOOD},"two\nlines"\ntxn_2,payment,x,0,1,USD,2026-12-01,,,,\n'
    assert error(text).line == 4


@pytest.mark.parametrize(("text", "line", "reason"), [
    ("", 0, "the file is empty"),
    ("id,type,amount\n", 1, "the header lacks fee, net, currency"),
    (HEADER + ",id\n", 1, "the header names 'id' twice"),
    (f"{HEADER}\n{GOOD}\ncaf\udce9,payment\n{GOOD}\n", 3, "not UTF-8"),
])
def test_a_bad_file_says_why(text: str, line: int, reason: str) -> None:
    raw = text.encode("utf-8", "surrogateescape")
    with pytest.raises(StatementFormatError) as caught:
        list(parse_lines(_rows(io.BufferedReader(io.BytesIO(raw)))))  # type: ignore[arg-type]
    assert caught.value.line == line and reason in caught.value.reason, caught.value
