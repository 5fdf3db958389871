"""The pure parts of backups and the restore drill: WAL segment arithmetic, reading
`pgbackrest info`, what counts as a difference, when archiving is failing, and the
folders and ports a scratch cluster may not take."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from paystream.backups import archive_id, parse_backups
from paystream.stack import scratch
from paystream.stack.backup import next_segment, segment_range
from paystream.stack.db_status import Archiving
from paystream.stack.restore_drill import differences
from paystream.stack.settings import StackSettings

# `pgbackrest info --output=json` of a stanza with a full and an incremental backup, as
# pgBackRest 2.45 printed it on the test stack (trimmed to the fields read).
INFO = [{
    "name": "paystream",
    "archive": [{"id": "15-1", "min": "000000010000000000000001",
                 "max": "000000010000000000000020"}],
    "backup": [
        {"label": "20261207-014122F", "type": "full", "prior": None,
         "timestamp": {"start": 1796607682, "stop": 1796607687},
         "archive": {"start": "000000010000000000000003", "stop": "000000010000000000000003"},
         "info": {"size": 32880771, "delta": 32880771,
                  "repository": {"size": 6320624, "delta": 6320624}}},
        {"label": "20261207-014122F_20261207-015232I", "type": "incr",
         "prior": "20261207-014122F",
         "timestamp": {"start": 1796608352, "stop": 1796608353},
         "archive": {"start": "000000010000000000000016", "stop": "000000010000000000000016"},
         "info": {"size": 33600000, "delta": 900000,
                  "repository": {"size": 6400000, "delta": 150000}}},
    ],
}]


def test_segments_roll_over_to_the_next_log_id_after_ff() -> None:
    assert next_segment("0000000100000000000000FE") == "0000000100000000000000FF"
    assert next_segment("0000000100000000000000FF") == "000000010000000100000000"
    assert segment_range("0000000100000000000000FF", "000000010000000100000001") == [
        "0000000100000000000000FF", "000000010000000100000000", "000000010000000100000001"]
    assert segment_range("000000010000000000000003", "000000010000000000000003") == [
        "000000010000000000000003"]


def test_a_range_across_a_failover_ends_at_the_last_position_not_its_timeline() -> None:
    """The backup on timeline 1, the restore point on 2 after a failover: the positions
    3 to 5 (a comparison of names never ended: every name of timeline 2 sorts after)."""
    assert segment_range("000000010000000000000003", "000000020000000000000005") == [
        "000000010000000000000003", "000000010000000000000004", "000000010000000000000005"]


def test_info_is_read_oldest_first_with_times_and_wal_ranges() -> None:
    found = parse_backups(INFO)
    assert [b.label for b in found] == ["20261207-014122F",
                                        "20261207-014122F_20261207-015232I"]
    incr = found[-1]
    assert incr.type == "incr" and incr.prior == "20261207-014122F"
    assert incr.stopped.timestamp() == 1796608353 and incr.started.tzinfo is not None
    assert (incr.wal_start, incr.wal_stop) == ("000000010000000000000016",) * 2
    assert incr.repo_bytes == 150000 and incr.size_bytes == 33600000
    assert archive_id(INFO) == "15-1"
    assert parse_backups([{"name": "other", "backup": INFO[0]["backup"]}]) == []
    assert archive_id([]) is None


def test_every_account_that_differs_is_named_and_a_missing_one_counts_as_zero() -> None:
    live = {("u1", "USDC", "available"): Decimal("7"),
            ("u2", "USDC", "available"): Decimal("0"),
            ("platform", "USDC", "fees"): Decimal("1")}
    restored = {("u1", "USDC", "available"): Decimal("7.000"),  # equal as numbers
                ("platform", "USDC", "fees"): Decimal("2")}
    rows = {("u1", "USDC", "available"): Decimal("8"), ("u1", "USDC", "held"): Decimal("0")}
    found = [(d.what, d.owner, d.kind, d.live, d.restored)
             for d in differences(live, restored, rows)]
    assert found == [("postings", "platform", "fees", Decimal("1"), Decimal("2")),
                     ("balances", "u1", "available", Decimal("7"), Decimal("8"))]
    assert differences(live, {**live}, {}) == []


def test_archiving_fails_only_while_the_last_attempt_failed() -> None:
    def archiving(archived: str | None, failed: str | None) -> Archiving:
        return Archiving(10, "x", archived, 1 if failed else 0, "y", failed)

    assert archiving("2026-12-07 01:00:00+00", "2026-12-07 01:05:00+00").failing
    assert not archiving("2026-12-07 01:06:00+00", "2026-12-07 01:05:00+00").failing
    assert archiving(None, "2026-12-07 01:05:00+00").failing
    assert not archiving("2026-12-07 01:06:00+00", None).failing


def test_a_scratch_cluster_may_not_take_the_live_folder_or_port(tmp_path: Path) -> None:
    s = StackSettings.from_env({"PAYSTREAM_STATE_DIR": str(tmp_path / "state"),
                                "PAYSTREAM_PG_PORT": "5999"})
    for live in (s.pg_data, s.pg_data / "base", s.state_dir):
        with pytest.raises(scratch.RestoreRefusedError, match="live cluster"):
            scratch.check_target(s, live, 5998)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "PG_VERSION").write_text("15")
    with pytest.raises(scratch.RestoreRefusedError, match="not an empty folder"):
        scratch.check_target(s, occupied, 5998)
    with pytest.raises(scratch.RestoreRefusedError, match="live server's port"):
        scratch.check_target(s, tmp_path / "new", 5999)


def test_discard_deletes_only_a_cluster_folder(tmp_path: Path) -> None:
    s = StackSettings.from_env({"PAYSTREAM_STATE_DIR": str(tmp_path / "state")})
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(scratch.RestoreRefusedError, match="no database cluster"):
        scratch.discard(s, precious)
    assert (precious / "notes.txt").read_text() == "keep me"
    with pytest.raises(scratch.RestoreRefusedError, match="live cluster"):
        scratch.discard(s, s.pg_data)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "PG_VERSION").write_text("15")
    assert scratch.discard(s, copy) is False and not copy.exists()
