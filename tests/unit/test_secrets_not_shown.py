"""Secrets are never shown: not on a command line, not in a DSN, and
the dev secrets file is private from its first byte."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from paystream import credentials, run
from paystream.schema import db
from paystream.stack import postgres
from paystream.stack.settings import StackSettings


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StackSettings:
    monkeypatch.setenv("PAYSTREAM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("PAYSTREAM_SECRETS_DIR", raising=False)
    for name in ("PAYSTREAM_DATABASE_URL", *db.ROLE_URL_VARIABLES.values()):
        monkeypatch.delenv(name, raising=False)
    return StackSettings.from_env()


def test_psql_gets_the_roles_sql_on_stdin_and_never_a_password(
        stack: StackSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[list[str], str | None]] = []

    def fake_run(cmd: list[str], component: str, **kwargs: object) -> str:
        stdin = kwargs.get("stdin")
        assert stdin is None or isinstance(stdin, str)
        calls.append((cmd, stdin))
        return "1\n"  # "the database exists"

    monkeypatch.setattr(postgres, "run", fake_run)
    monkeypatch.setattr(postgres, "_bin", lambda name: f"/usr/bin/{name}")
    postgres.ensure_role_and_database(stack)
    passwords = [credentials.read_secret(db.secret_name(r)) for r in db.ROLE_NAMES]
    assert len(set(passwords)) == len(db.ROLE_NAMES)  # generated, one each
    assert "paystream" not in passwords
    sql = "".join(stdin or "" for _, stdin in calls)
    assert "ALTER ROLE \"paystream_cdc\"" in sql and "SCRAM-SHA-256$4096:" in sql
    for cmd, stdin in calls:
        line = " ".join(cmd)
        assert "PASSWORD" not in line and "-c" not in cmd
        for password in passwords:
            assert password not in line
            assert password not in (stdin or "")  # a verifier, not the password


def test_the_passfile_is_private_and_the_dsns_carry_no_password(
        stack: StackSettings) -> None:
    passwords = postgres.role_passwords()
    path = postgres.write_pgpass(passwords)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    text = path.read_text()
    for role, password in passwords.items():
        assert f"*:*:*:{db.ROLE_NAMES[role]}:{password}\n" in text
        dsn = stack.role_url(role)
        assert password not in dsn
        assert dsn.startswith(f"postgresql://{db.ROLE_NAMES[role]}@127.0.0.1:")
        assert f"passfile={path}" in dsn
    env = stack.service_env()
    assert not any(p in " ".join(env.values()) for p in passwords.values())
    assert "PAYSTREAM_PG_PASSWORD" not in env and "PAYSTREAM_DATABASE_URL" not in env
    connect_env = stack.connect_env()
    assert connect_env["PAYSTREAM_PG_USER"] == "paystream_cdc"
    assert connect_env["PAYSTREAM_PG_PASSWORD"] == passwords["cdc"]
    assert passwords["owner"] not in connect_env.values()


def test_where_never_shows_a_password() -> None:
    assert db.where("postgresql://paystream_ops:s3cret@db.example:6432/pay") == \
        "paystream_ops@db.example:6432/pay"
    assert "s3cret" not in db.where("host=x password=s3cret user=u dbname=d")


def test_dev_secrets_are_private_from_the_first_byte(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[tuple[str, int, int]] = []
    real_open = os.open

    def spy(path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        opened.append((str(path), flags, mode))
        return real_open(path, flags, mode)

    monkeypatch.setattr(credentials.os, "open", spy)
    monkeypatch.delenv("ALCHEMY_SIGNING_KEY", raising=False)
    monkeypatch.delenv("PAYMENTS_WEBHOOK_SECRET", raising=False)
    old_umask = os.umask(0)  # a permissive umask: only the open() mode protects it
    try:
        values = run.dev_secrets(tmp_path / "state")
    finally:
        os.umask(old_umask)
    path = tmp_path / "state" / "dev-secrets.env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [(flags & os.O_EXCL, mode) for p, flags, mode in opened
            if "dev-secrets.env" in p] == [(os.O_EXCL, 0o600)]
    assert run.dev_secrets(tmp_path / "state") == values  # kept across restarts


def test_dev_secrets_leave_the_state_dir_traversable(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The postgres user reaches <state>/pgdata through the state dir: writing the dev
    secrets there made it 0700 once, and the next `stack up` failed (Permission denied)."""
    monkeypatch.delenv("ALCHEMY_SIGNING_KEY", raising=False)
    monkeypatch.delenv("PAYMENTS_WEBHOOK_SECRET", raising=False)
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    run.dev_secrets(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o755
    assert stat.S_IMODE((state / "dev-secrets.env").stat().st_mode) == 0o600
