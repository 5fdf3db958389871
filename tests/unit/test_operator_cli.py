"""What every operator command shares: the table format, and the message when the
database cannot be reached (exit 2, no password in it)."""

from __future__ import annotations

import pytest

from paystream.cli import main
from paystream.operator_cli import format_table


def test_table_columns_align_and_rows_split() -> None:
    text = format_table(("user", "asset", "balance"), [("u1", "USDC", "10.5"), ("u22", "ETH", "3")],
                        right_aligned={2}, rule=True)
    assert text.splitlines() == ["user  asset  balance",
                                 "----  -----  -------",
                                 "u1    USDC      10.5",
                                 "u22   ETH          3"]


def test_an_empty_table_is_its_header() -> None:
    assert format_table(("id", "status"), []) == "id  status"


def test_unreachable_database_exits_2_with_the_address_and_no_password(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Port 1 on loopback: nothing listens, the connection is refused at once.
    monkeypatch.setenv("PAYSTREAM_DATABASE_URL",
                       "postgresql://paystream:s3cret-pw@127.0.0.1:1/paystream")
    assert main(["balances"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("paystream balances: cannot reach Postgres at "
                          "paystream@127.0.0.1:1/paystream")
    assert "s3cret-pw" not in err
