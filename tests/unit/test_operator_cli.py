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


@pytest.mark.parametrize(("argv", "user"), [
    (["balances"], "paystream_ops"), (["users", "add", "u1"], "paystream_ops"),
    (["dlq", "list"], "paystream_ops"), (["shortfalls"], "paystream_ops"),
    (["housekeeping", "--dry-run"], "paystream_ops"), (["migrate"], "paystream"),
])
def test_each_operator_command_logs_in_as_its_role(
        argv: list[str], user: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    for name in ("PAYSTREAM_DATABASE_URL", "PAYSTREAM_OPS_DATABASE_URL",
                 "PAYSTREAM_OWNER_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PAYSTREAM_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("PAYSTREAM_PG_PORT", "1")  # refused at once: the message names it
    assert main(argv) == 2
    assert f"cannot reach Postgres at {user}@127.0.0.1:1/paystream" in capsys.readouterr().err
