"""Backups and restores on the real stack: pgBackRest archiving from `stack up`, the
`paystream db` commands, and the restore drill under ledger traffic.

The evidence is read around the code under test: the server's own settings and
pg_stat_archiver, the repository's files on disk, a scratch cluster queried directly,
the live books through `paystream balances --at`. Nothing is mocked: the ledger
handler writes the traffic, pgBackRest restores, Postgres replays.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg2
import pytest

from paystream.backups import BackupSettings, backups, info_json
from paystream.backups import archive_id as archive_id_of
from paystream.consumers.connection import Database
from paystream.launch import paystream_argv
from paystream.schema.db import connect, database_url
from paystream.stack import backup, restore_drill, scratch
from paystream.stack.settings import StackSettings
from tests.integration.test_ops_reconcile import record
from tests.support.consumers import store_records
from tests.support.ids import unique
from tests.support.ledger import ledger_apply

ROOT = Path(__file__).resolve().parents[2]


def paystream(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(paystream_argv(*args), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def fund(owner: psycopg2.extensions.connection, ledger: Database, user: str,
         deposit: str = "10", withdrawal: str = "3") -> None:
    """A user whose books the real ledger handler writes: a deposit, a withdrawal."""
    batch = [record(user, unique("ev-dep"), "deposit", deposit, "USDC", 0),
             record(user, unique("ev-wd"), "withdrawal", withdrawal, "USDC", 1)]
    with owner.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        store_records(cur, batch)
    result = ledger_apply(ledger.connection(), batch)
    assert result.outcomes["applied"] == 2, result


class Traffic:
    """Ledger batches applied one after the other in a thread until stopped."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.applied = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        owner = connect(database_url("owner"))
        owner.autocommit = True
        ledger = Database(application_name="paystream-test-traffic")
        try:
            while not self.stop.is_set():
                fund(owner, ledger, unique("bk-traffic"))
                self.applied += 1
                time.sleep(0.02)
        except BaseException as exc:  # reported by the test that stops it
            self.error = exc
        finally:
            owner.close()
            ledger.close()

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.error is None, f"the traffic thread failed: {self.error!r}"
        assert self.applied > 0


@pytest.fixture(scope="module")
def stack() -> StackSettings:
    s = StackSettings.from_env()
    try:
        connect(database_url("owner")).close()
    except psycopg2.OperationalError as exc:
        pytest.fail(f"Postgres is not reachable ({exc}); run `paystream stack up`")
    return s


@pytest.fixture(scope="module")
def settings() -> BackupSettings:
    return BackupSettings.from_env()


@pytest.fixture
def scratch_dir(stack: StackSettings) -> Iterator[Path]:
    """A folder for a scratch cluster under the state dir (postgres can reach it),
    discarded at the end whatever happened."""
    path = stack.state_dir / "scratch" / unique("test")
    yield path
    scratch.discard(stack, path)


def superuser(stack: StackSettings, sql: str) -> str:
    from paystream.stack import postgres

    return postgres.superuser_sql(stack, sql, stack.pg_db).strip()


def test_stack_up_archives_wal_into_an_encrypted_repository_with_a_backup(
        stack: StackSettings, settings: BackupSettings) -> None:
    # The live server archives through pgBackRest, and it works: segments archived.
    assert superuser(stack, "SHOW archive_mode") == "on"
    assert "archive-push" in superuser(stack, "SHOW archive_command")
    # From the command line, in no file a backup copies (a restored copy never pushes).
    assert superuser(stack, "SELECT string_agg(DISTINCT source, ',') FROM pg_settings"
                            " WHERE name IN ('archive_mode', 'archive_command')") == \
        "command line"
    for conf in ("postgresql.conf", "postgresql.auto.conf"):
        settings_lines = [line.split("#")[0] for line in
                          (stack.pg_data / conf).read_text().splitlines()]
        assert not [line for line in settings_lines if "archive" in line], conf
    before = int(superuser(stack, "SELECT archived_count FROM pg_stat_archiver"))
    superuser(stack, "CREATE TEMP TABLE t (); SELECT pg_switch_wal()")  # a fresh segment
    deadline = time.monotonic() + 60
    while int(superuser(stack, "SELECT archived_count FROM pg_stat_archiver")) <= before:
        assert time.monotonic() < deadline, "no segment archived within 60 s"
        time.sleep(0.5)
    # Files as the stack writes them: the key 0600 in the secrets folder, the
    # configuration 0600 owned by postgres, the repository's files encrypted (pgBackRest
    # writes them in OpenSSL's salted format; the plain format is a text file of keys).
    key = stack.state_dir / "secrets" / "pgbackrest-cipher"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    conf = settings.config_path
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert conf.owner() == "postgres"
    info = stack.state_dir / "pgbackrest" / "repo" / "backup" / "paystream" / "backup.info"
    assert info.read_bytes()[:8] == b"Salted__"
    # A backup exists; an incremental one is taken on top of it and listed after it.
    found = backups(settings)
    assert found, "stack up took no first backup"
    done = paystream("db", "backup", "--type", "incr")
    assert done.returncode == 0, done.stderr
    listed = json.loads(paystream("db", "backups", "--json").stdout)
    assert [b["label"] for b in listed[:-1]] == [b.label for b in found]
    assert listed[-1]["type"] == "incr" and listed[-1]["prior"] == found[-1].label
    assert listed[-1]["wal_start"] <= listed[-1]["wal_stop"]
    # db status: one node, the primary, as Postgres itself says; the new backup.
    status = paystream("db", "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    shown = json.loads(status.stdout)
    [node] = shown["nodes"]
    assert node["role"] == "primary" and node["port"] == stack.pg_port
    cmdline = Path(f"/proc/{node['pid']}/cmdline").read_bytes().split(b"\0")
    assert str(stack.pg_data).encode() in cmdline  # the live postmaster itself
    assert node["data_dir"] == superuser(stack, "SHOW data_directory")
    assert shown["newest_backup"]["label"] == listed[-1]["label"]
    assert shown["problems"] == []


def test_the_health_exporter_publishes_archiving_and_the_newest_backups_age(
        stack: StackSettings, settings: BackupSettings) -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from paystream.ops.backup_metrics import BackupCollector

    registry = CollectorRegistry()
    registry.register(BackupCollector(database_url("ops"), settings))
    samples = {s.name: s.value for family in text_string_to_metric_families(
        generate_latest(registry).decode()) for s in family.samples}
    archived = int(superuser(stack, "SELECT archived_count FROM pg_stat_archiver"))
    assert archived - 5 <= samples["paystream_wal_archived_total"] <= archived
    assert samples["paystream_wal_archive_failed_total"] == int(
        superuser(stack, "SELECT failed_count FROM pg_stat_archiver"))
    found = backups(settings)
    assert samples["paystream_backups"] == len(found)
    age = datetime.now(UTC).timestamp() - found[-1].stopped.timestamp()
    assert abs(samples["paystream_backup_newest_age_seconds"] - age) < 30


def test_restores_refuse_the_live_cluster(stack: StackSettings, tmp_path: Path) -> None:
    to = datetime.now(UTC).isoformat()
    live = paystream("db", "restore", "--to", to, "--into", str(stack.pg_data))
    assert live.returncode == 2 and "live cluster's data dir" in live.stderr
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "file").write_text("x")
    busy = paystream("db", "restore", "--to", to, "--into", str(occupied))
    assert busy.returncode == 2 and "not an empty folder" in busy.stderr
    assert (occupied / "file").read_text() == "x"
    port = paystream("db", "verify-restore", "--into", str(tmp_path / "new"),
                     "--port", str(stack.pg_port))
    assert port.returncode == 2 and "live server's port" in port.stderr
    assert not (tmp_path / "new").exists()


def test_drill_compares_the_exact_restored_moment_and_catches_a_tampered_balance(
        stack: StackSettings, settings: BackupSettings, scratch_dir: Path) -> None:
    # The drill fails on a copy that does not reconcile: the shared live ledger must.
    live = paystream("reconcile")
    assert live.returncode == 0, ("the live ledger does not reconcile before the drill"
                                  f" (an earlier test left it so):\n{live.stdout}")
    owner = connect(database_url("owner"))
    owner.autocommit = True
    ledger = Database(application_name="paystream-test-straddler")
    straddler = unique("bk-straddle")
    batch = [record(straddler, unique("ev-dep"), "deposit", "5", "USDC", 0)]
    with owner.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (straddler,))
        store_records(cur, batch)
    port = free_port()
    with Traffic():
        time.sleep(1)
        # A ledger transaction that begins before the mark and commits after it: its
        # transfer's created_at (the transaction's start) is before T.
        conn = ledger.connection()
        with conn.cursor() as cur:
            cur.execute("SELECT now()")
        mark = restore_drill.mark(stack)
        assert ledger_apply(conn, batch).outcomes["applied"] == 1
        restored = scratch.restore(stack, settings, scratch_dir, port,
                                   ["--type=name", f"--target={mark.name}"])
        mark.save(restored.data_dir)
        outcome = restore_drill.compare(stack, restored, mark)
    assert outcome.report.clean and outcome.differences == [], outcome
    assert outcome.ok and outcome.in_flight >= 1 and outcome.accounts > 0
    # `balances --at T` on the live books counts the straddler's deposit; the restored
    # copy rightly lacks it (committed after the restore point), and the drill agrees.
    at = paystream("balances", "--user", straddler, "--at", mark.at)
    assert at.returncode == 0, at.stdout + at.stderr
    assert [straddler, "USDC", "5", "0", "0"] in [line.split() for line in
                                                 at.stdout.splitlines()], at.stdout
    copy = connect(restored.dsn(stack, "owner"))
    try:
        with copy.cursor() as cur:
            cur.execute("SELECT count(*) FROM balances WHERE user_id = %s", (straddler,))
            assert cur.fetchone() == (0,)
            cur.execute("SELECT count(*) FROM balances")
            restored_rows = cur.fetchone()
            # Never reachable by the pipeline: no slot, no WAL sender, no archiving.
            cur.execute("SELECT count(*) FROM pg_replication_slots")
            assert cur.fetchone() == (0,)
            cur.execute("SELECT current_setting('max_wal_senders'),"
                        " current_setting('archive_mode'), pg_is_in_recovery()")
            assert cur.fetchone() == ("0", "off", False)
    finally:
        copy.close()
    auto_conf = (scratch_dir / "postgresql.auto.conf").read_text()
    assert "archive-get" in auto_conf and "archive-push" not in auto_conf
    assert restored_rows is not None and restored_rows[0] == outcome.balance_rows
    # The live slot is untouched by a restore (only the copy's was dropped).
    assert superuser(stack, "SELECT count(*) FROM pg_replication_slots"
                            " WHERE slot_name = 'paystream_outbox'") == "1"
    # The kept copy compared again through the command: equal; then one balance altered
    # in the copy: exit 1, naming it.
    again = paystream("db", "verify-restore", "--from-dir", str(scratch_dir))
    assert again.returncode == 0, again.stdout + again.stderr
    copy = connect(restored.dsn(stack, "owner"))
    copy.autocommit = True
    try:
        with copy.cursor() as cur:
            cur.execute("UPDATE balances SET balance = balance + 1 WHERE user_id ="
                        " (SELECT min(user_id) FROM balances WHERE user_id LIKE"
                        " 'bk-traffic-%%') RETURNING user_id")
            row = cur.fetchone()
    finally:
        copy.close()
    assert row is not None, "no traffic before the restore point"
    victim = row[0]
    tampered = paystream("db", "verify-restore", "--from-dir", str(scratch_dir))
    assert tampered.returncode == 1, tampered.stdout + tampered.stderr
    lines = [line for line in tampered.stdout.splitlines() if victim in line]
    assert any(line.split()[:2] == ["balances", victim] for line in lines), tampered.stdout
    assert "MISMATCH" in tampered.stdout and "FAILED" in tampered.stdout
    # Discarded: the server stopped, the folder gone.
    gone = paystream("db", "discard", str(scratch_dir))
    assert gone.returncode == 0 and not scratch_dir.exists() and not listening(port)
    owner.close()
    ledger.close()


def test_verify_restore_passes_under_traffic_and_leaves_nothing_behind(
        stack: StackSettings) -> None:
    port = free_port()
    before = set((stack.state_dir / "scratch").glob("*"))
    with Traffic():
        started = time.monotonic()
        done = paystream("db", "verify-restore", "--port", str(port))
        took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verify-restore: ok, every balance equal" in done.stdout
    assert "reconcile on the restored copy: ok" in done.stdout
    print(f"verify-restore under traffic: {took:.1f} s\n{done.stdout}")
    assert not listening(port)
    assert set((stack.state_dir / "scratch").glob("*")) == before


def test_a_missing_wal_segment_fails_the_drill_and_a_restore_naming_it(
        stack: StackSettings, settings: BackupSettings, scratch_dir: Path) -> None:
    newest = backups(settings)[-1]
    # Segments after the newest backup, so that one can go missing in the middle.
    for _ in range(3):
        superuser(stack, "CREATE TEMP TABLE t (); SELECT pg_switch_wal()")
    gap = backup.next_segment(newest.wal_stop)
    deadline = time.monotonic() + 60
    while backup.missing_wal(settings, gap, backup.next_segment(gap)):
        assert time.monotonic() < deadline, "segments not archived within 60 s"
        time.sleep(0.5)
    archive_id = archive_id_of(info_json(settings))
    archive = stack.state_dir / "pgbackrest" / "repo" / "archive" / "paystream" / str(archive_id)
    [stored] = list((archive / gap[:16]).glob(f"{gap}-*"))
    aside = stack.state_dir / "scratch" / stored.name
    aside.parent.mkdir(exist_ok=True)
    shutil.move(stored, aside)
    try:
        drill = paystream("db", "verify-restore", "--port", str(free_port()))
        assert drill.returncode == 1, drill.stdout + drill.stderr
        assert gap in drill.stderr and "lacks WAL segment" in drill.stderr, drill.stderr
        to = superuser(stack, "SELECT now()")
        restore = paystream("db", "restore", "--to", to, "--into", str(scratch_dir),
                            "--port", str(free_port()))
        assert restore.returncode == 1, restore.stdout + restore.stderr
        assert f"segment {gap} is missing" in restore.stderr, restore.stderr
    finally:
        shutil.move(aside, stored)
        os.chown(stored, stored.parent.stat().st_uid, stored.parent.stat().st_gid)
