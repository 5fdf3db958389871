"""docker-compose's credentials path (stack/compose.py, the roles over a superuser DSN):
the same role statements as `stack up`, a verifier and never a password in SQL, each
container's files private and its own."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import pytest

from paystream import credentials
from paystream.schema import db
from paystream.stack import compose, postgres
from paystream.stack.process import StackError


class FakeCursor:
    def __init__(self, log: list[tuple[str, str, Any]], conn: FakeConn) -> None:
        self.log, self.conn = log, conn
        self._row: tuple[Any, ...] | None = None

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, params: Any = None) -> None:
        assert self.conn.autocommit, "CREATE DATABASE needs autocommit"
        self.log.append((self.conn.dbname, sql, params))
        if "rolsuper" in sql:
            self._row = (self.conn.superuser,)
        elif "pg_database" in sql:
            self._row = (1,) if self.conn.db_exists else None

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._row


class FakeConn:
    def __init__(self, log: list[tuple[str, str, Any]], dbname: str, *, superuser: bool,
                 db_exists: bool) -> None:
        self.log, self.dbname, self.superuser, self.db_exists = log, dbname, superuser, \
            db_exists
        self.autocommit = False
        self.closed = False

    def cursor(self) -> FakeCursor:
        return FakeCursor(self.log, self)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_pg(monkeypatch: pytest.MonkeyPatch):
    log: list[tuple[str, str, Any]] = []
    state = {"superuser": True, "db_exists": False, "dsns": []}

    def fake_connect(dsn: str, **kwargs: Any) -> FakeConn:
        state["dsns"].append((dsn, kwargs))
        return FakeConn(log, kwargs.get("dbname", "postgres"),
                        superuser=bool(state["superuser"]), db_exists=bool(state["db_exists"]))

    monkeypatch.setattr(postgres.psycopg2, "connect", fake_connect)
    return log, state


PASSWORDS: dict[db.DbRole, str] = {r: f"pw-{r}-Zq9" for r in db.ROLE_NAMES}
SUPER = "postgresql://postgres:supersecret@postgres:5432/postgres"


def test_the_psql_script_and_the_dsn_path_run_the_same_statements(fake_pg):
    log, _ = fake_pg
    assert postgres.ensure_roles_over_dsn(SUPER, PASSWORDS, "paystream") is True
    sent = [sql for _, sql, _ in log]
    role_sql = [s for s in sent if "ROLE" in s]
    # Same shape as the psql script (the verifiers' salts differ run to run).
    script = postgres.roles_sql(PASSWORDS)
    assert "\\gexec" not in script  # plain SQL: both psql and psycopg2 run it
    salt = re.compile(r"SCRAM-SHA-256\$4096:[^']+")
    assert [salt.sub("V", s) for s in role_sql] == \
        [salt.sub("V", s) for s in postgres.role_statements(PASSWORDS)]
    assert [salt.sub("V", f"{s};\n") for s in role_sql] == \
        salt.sub("V", script).splitlines(keepends=True)
    for name in db.ROLE_NAMES.values():
        assert any(f'CREATE ROLE "{name}"' in s for s in role_sql)
        assert any(s.startswith(f'ALTER ROLE "{name}" WITH LOGIN NOSUPERUSER') for s in role_sql)
    cdc = next(s for s in role_sql if s.startswith('ALTER ROLE "paystream_cdc"'))
    assert " REPLICATION " in cdc
    assert all(" NOREPLICATION " in s for s in role_sql
               if s.startswith("ALTER") and " WITH " in s and "paystream_cdc" not in s)
    # Each role's session defaults: reset, then exactly schema.db.ROLE_SETTINGS.
    assert 'ALTER ROLE "paystream_ledger" SET lock_timeout = \'10s\'' in role_sql
    assert 'ALTER ROLE "paystream_ingest" SET statement_timeout = \'2s\'' in role_sql
    assert 'ALTER ROLE "paystream" RESET ALL' in role_sql
    assert not any(s.startswith('ALTER ROLE "paystream" SET') for s in role_sql)
    # The database (owned by the owner), then the slot in it.
    assert 'CREATE DATABASE "paystream" OWNER "paystream"' in sent
    assert log[-1] == ("paystream", postgres.SLOT_SQL, None)


def test_the_dsn_path_sends_verifiers_never_a_password(fake_pg):
    log, _ = fake_pg
    postgres.ensure_roles_over_dsn(SUPER, PASSWORDS, "paystream")
    text = "\n".join(f"{sql} {params}" for _, sql, params in log)
    for password in PASSWORDS.values():
        assert password not in text
    assert text.count("SCRAM-SHA-256$4096:") == len(db.ROLE_NAMES)
    assert "supersecret" not in text


def test_the_dsn_path_is_idempotent_and_refuses_a_non_superuser(fake_pg):
    log, state = fake_pg
    state["db_exists"] = True
    assert postgres.ensure_roles_over_dsn(SUPER, PASSWORDS, "paystream") is False
    assert not any(sql.startswith("CREATE DATABASE") for _, sql, _ in log)
    state["superuser"] = False
    log.clear()
    with pytest.raises(StackError, match="not a superuser"):
        postgres.ensure_roles_over_dsn(SUPER, PASSWORDS, "paystream")
    assert not any("ROLE" in sql and "rolsuper" not in sql for _, sql, _ in log)
    assert "supersecret" not in db.where(SUPER)


def test_the_secrets_job_writes_private_files_and_keeps_the_passwords(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_SECRETS_DIR", str(tmp_path / "setup"))
    out = tmp_path / "out"
    compose.write_all(out, chown=False, brokers=1)
    first = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    for path in [*first, *(tmp_path / "setup").iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((out / "ledger").stat().st_mode) == 0o700
    # The setup job's passfile has every role; a container's has its own only.
    setup_pgpass = (tmp_path / "setup" / "pgpass").read_text()
    assert len(setup_pgpass.splitlines()) == len(db.ROLE_NAMES)
    assert (out / "ingest" / "pgpass").read_text() == db.pgpass_text(
        {"paystream_ingest": credentials.read_secret("db-ingest")})
    # Again: the same passwords (generated once), the same files; a stale file goes.
    (out / "ingest" / "kafka-admin").write_text("leftover")
    compose.write_all(out, chown=False, brokers=1)
    second = {p: p.read_text() for p in out.rglob("*") if p.is_file()}
    assert second == first


@pytest.mark.parametrize("brokers", [1, compose.CLUSTER_BROKERS])
def test_the_secrets_job_gives_each_file_to_its_containers_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, brokers: int) -> None:
    monkeypatch.setenv("PAYSTREAM_SECRETS_DIR", str(tmp_path / "setup"))
    owned: dict[str, set[int]] = {}

    def fake_chown(path: Path, uid: int, gid: int) -> None:
        assert uid == gid
        rel = Path(path).relative_to(tmp_path)
        owned.setdefault(rel.parts[1] if rel.parts[0] == "out" and len(rel.parts) > 1
                         else "setup", set()).add(uid)

    monkeypatch.setattr(compose.os, "chown", fake_chown)
    compose.write_all(tmp_path / "out", chown=True, brokers=brokers)
    absent = compose.kafka_services(compose.CLUSTER_BROKERS)[brokers:]  # no such node
    assert owned == {name: {uid} for name, uid in compose.UIDS.items() if name not in absent}


def test_cluster_ids_look_like_kafkas() -> None:
    for _ in range(200):
        cid = compose.random_cluster_id()
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cid) and not cid.startswith("-")
