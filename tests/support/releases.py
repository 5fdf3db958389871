"""The previous release, as the migration tests meet it: the code of the commit before
the newest migration, read from git (no checkout), laid out as the installed package so
that `PYTHONPATH=<view>` runs it with this venv's interpreter and dependencies (a
PYTHONPATH entry comes before the editable install's finder)."""

from __future__ import annotations

import io
import subprocess
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = "schema/migrations"


@dataclass(frozen=True)
class Release:
    commit: str  # the commit the code is read from
    view: Path  # PYTHONPATH for it
    migrations: frozenset[str]  # the migration files it shipped


def _git(*args: str) -> bytes:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)
    if done.returncode != 0:
        pytest.fail(f"git {' '.join(args)}: {done.stderr.decode().strip()} (the previous "
                    "release is read from this repository's history: a full clone)")
    return done.stdout


def previous_commit() -> str:
    """The commit before the one that added the newest migration: the previous
    release, as far as the schema is concerned."""
    newest = _git("log", "-1", "--format=%H", "--diff-filter=A", "--", MIGRATIONS
                  ).decode().strip()
    return _git("rev-parse", f"{newest}^").decode().strip()


def previous_release(tmp: Path, commit: str | None = None) -> Release:
    """The release before the newest migration (or the code of `commit`: an older
    release), extracted under `tmp`."""
    commit = _git("rev-parse", commit).decode().strip() if commit else previous_commit()
    source = tmp / "source"
    source.mkdir()
    with tarfile.open(fileobj=io.BytesIO(_git("archive", commit))) as archive:
        archive.extractall(source)  # our own history (3.11.2 has no filter=)
    dirs = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    package = tmp / "view" / "paystream"
    package.mkdir(parents=True)
    for name, folder in dirs.items():
        if name == "paystream":
            for entry in (source / folder).iterdir():
                (package / entry.name).symlink_to(entry)
        else:
            (package / name.split(".", 1)[1]).symlink_to(source / folder)
    shipped = frozenset(p.name for p in (source / MIGRATIONS).glob("*.sql"))
    return Release(commit, tmp / "view", shipped)


def previous_migrations() -> tuple[str, list[tuple[str, str]]]:
    """The commit of the release before the newest migration and the migrations it
    shipped, as (name, sql) in the runner's order (schema.migrate.migration_files)."""
    commit = previous_commit()
    paths = sorted(p for p in _git("ls-tree", "--name-only", commit, f"{MIGRATIONS}/"
                                   ).decode().split() if p.endswith(".sql"))
    return commit, [(Path(p).stem, _git("show", f"{commit}:{p}").decode()) for p in paths]
