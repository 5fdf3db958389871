"""With a standby every process's DSN names both nodes and asks libpq for the writable
one, and bypasses PgBouncer; without one the DSN is what it always was
(docs/operations.md#a-standby-and-failover)."""

from __future__ import annotations

import psycopg2.extensions

from paystream.schema.db import PostgresAddress, database_url
from paystream.stack.settings import StackSettings
from paystream.stack.standby import node_conf_text
from paystream.stack.targets import metrics_targets

ONE_NODE = {"PAYSTREAM_PG_PORT": "5501"}
TWO_NODES = {**ONE_NODE, "PAYSTREAM_STANDBY": "1", "PAYSTREAM_PG_STANDBY_PORT": "5502"}


def _parts(dsn: str) -> dict[str, str]:
    return psycopg2.extensions.parse_dsn(dsn)


def test_one_node_dsn_is_unchanged() -> None:
    parts = _parts(database_url("ledger", ONE_NODE, address=PostgresAddress.from_env(
        ONE_NODE)))
    assert parts["host"] == "127.0.0.1" and parts["port"] == "5501"
    assert "target_session_attrs" not in parts


def test_standby_dsn_names_both_nodes_and_wants_the_writable_one() -> None:
    parts = _parts(PostgresAddress.from_env(TWO_NODES).dsn("ingest"))
    assert parts["host"] == "127.0.0.1,127.0.0.1"
    assert parts["port"] == "5501,5502"
    assert parts["target_session_attrs"] == "read-write"
    assert parts["user"] == "paystream_ingest"


def test_standby_bypasses_pgbouncer() -> None:
    env = {**TWO_NODES, "PAYSTREAM_DB_VIA_PGBOUNCER": "1", "PAYSTREAM_PGBOUNCER_PORT": "6599"}
    assert _parts(PostgresAddress.from_env(env).dsn("ledger"))["port"] == "5501,5502"
    alone = {**ONE_NODE, "PAYSTREAM_DB_VIA_PGBOUNCER": "1", "PAYSTREAM_PGBOUNCER_PORT": "6599"}
    assert _parts(PostgresAddress.from_env(alone).dsn("ledger"))["port"] == "6599"


def test_the_stack_passes_the_standby_to_its_processes(monkeypatch) -> None:
    for name, value in TWO_NODES.items():
        monkeypatch.setenv(name, value)
    s = StackSettings.from_env()
    assert s.standby and s.pg_standby_port == 5502
    env = s.service_env()
    assert env["PAYSTREAM_STANDBY"] == "1" and env["PAYSTREAM_PG_STANDBY_PORT"] == "5502"
    assert _parts(s.database_url)["port"] == "5501,5502"
    assert "failover" in {t.job for t in metrics_targets()}


def test_one_node_stack_scrapes_no_follower(monkeypatch) -> None:
    monkeypatch.delenv("PAYSTREAM_STANDBY", raising=False)
    assert "failover" not in {t.job for t in metrics_targets()}


def test_node_settings_restore_logical_wal_and_drop_the_preloaded_library() -> None:
    lines = dict(line.split(" = ", 1) for line in node_conf_text().splitlines()
                 if " = " in line)
    assert lines["wal_level"] == "'logical'"
    assert lines["shared_preload_libraries"] == "''"
    assert lines["archive_mode"] == "'on'"
