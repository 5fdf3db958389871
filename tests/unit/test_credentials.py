"""Secret files: created private from the first byte, generated once, never a default."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from paystream.credentials import MissingSecretError, ensure_secret, read_secret, write_private


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_secret_is_generated_once_and_kept(tmp_path: Path) -> None:
    first = ensure_secret("db-ingest", tmp_path)
    assert len(first) >= 32
    assert ensure_secret("db-ingest", tmp_path) == first
    assert ensure_secret("db-ledger", tmp_path) != first
    assert read_secret("db-ingest", tmp_path) == first


def test_files_are_0600_in_a_0700_folder_even_with_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        folder = tmp_path / "secrets"
        ensure_secret("kafka-admin", folder)
        write_private(folder / "pgpass", "x\n")
    finally:
        os.umask(old)
    assert _mode(folder) == 0o700
    assert _mode(folder / "kafka-admin") == 0o600
    assert _mode(folder / "pgpass") == 0o600


def test_a_rewrite_is_private_too(tmp_path: Path) -> None:
    path = tmp_path / "s" / "pgpass"
    write_private(path, "a\n")
    os.chmod(path, 0o644)
    write_private(path, "b\n")
    assert path.read_text() == "b\n" and _mode(path) == 0o600


def test_a_missing_secret_says_what_to_run(tmp_path: Path) -> None:
    with pytest.raises(MissingSecretError, match="paystream stack up"):
        read_secret("db-ops", tmp_path)


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b", "", "X"])
def test_names_cannot_leave_the_folder(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError):
        ensure_secret(name, tmp_path)
