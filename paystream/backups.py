"""The backup repository, as every reader sees it: where pgBackRest's configuration is,
the stanza, the retention, and the backups it holds (`pgbackrest info`).

Shared by `paystream db …` and `stack up` (stack/backup.py, which write the
configuration and take the backups) and by the health exporter (ops/backup_metrics.py,
which publishes the newest backup's age). Reading needs only the configuration file:
pgBackRest decrypts the repository's manifests with the key it names.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import Field

from paystream import credentials
from paystream.env import EnvSettings, OptOut

# One database cluster, one stanza: the name pgBackRest files it under in the repository.
STANZA = "paystream"
# The repository key, generated once in the secrets folder (credentials.ensure_secret).
CIPHER_SECRET = "pgbackrest-cipher"


class BackupSettings(EnvSettings):
    """Read by `paystream stack up`, `paystream db …` and the health exporter
    ([operations](operations.md#backups-and-restores)): pgBackRest's configuration and
    the backups' retention."""

    doc_section = "Backups"

    config: Path | None = Field(
        None, alias="PAYSTREAM_PGBACKREST_CONFIG",
        json_schema_extra={"shown": "`pgbackrest.conf` in the state dir's pgbackrest folder"},
        description="pgBackRest's configuration file (written by `stack up`; its "
                    "repository, the folder `repo` beside it, stands for off-host storage)")
    retention_full: int = Field(
        2, alias="PAYSTREAM_BACKUP_RETENTION_FULL", ge=1,
        description="full backups kept (with the differential and incremental backups and "
                    "the WAL that depend on them); older ones expire after each backup")
    retention_diff: int = Field(
        7, alias="PAYSTREAM_BACKUP_RETENTION_DIFF", ge=1,
        description="differential backups kept")
    first_at_up: OptOut = Field(
        True, alias="PAYSTREAM_BACKUP_AT_UP",
        description="`0`: `stack up` takes no first full backup when the repository has "
                    "none (archived WAL alone restores nothing)")
    max_age_s: float = Field(
        26 * 3600.0, alias="PAYSTREAM_BACKUP_MAX_AGE_S", gt=0,
        description="`paystream db status` flags a newest backup older than this (the "
                    "alert `PaystreamBackupTooOld` uses the same 26 h)")

    @property
    def config_path(self) -> Path:
        return self.config or credentials.state_dir() / "pgbackrest" / "pgbackrest.conf"


@dataclass(frozen=True)
class Backup:
    """One backup in the repository, as `pgbackrest info` lists it."""

    label: str
    type: str  # full, diff, incr
    started: datetime
    stopped: datetime
    wal_start: str  # the first WAL segment it needs
    wal_stop: str  # the last one: a restore replays at least up to its end
    size_bytes: int  # of the database it copied
    repo_bytes: int  # what it takes in the repository (compressed, incremental)
    prior: str | None  # the backup it depends on (diff, incr)

    def age_s(self, now: datetime | None = None) -> float:
        return ((now or datetime.now(UTC)) - self.stopped).total_seconds()


class BackupInfoError(RuntimeError):
    """The repository could not be read (no configuration, pgBackRest missing or failing)."""


def info_json(settings: BackupSettings, *, timeout_s: float = 30.0) -> list[dict[str, object]]:
    """`pgbackrest info --output=json` of the stanza, parsed. Logs nothing to files: a
    reader (the exporter, maybe as another user) must not leave files in the log folder."""
    exe = shutil.which("pgbackrest")
    path = settings.config_path
    if exe is None:
        raise BackupInfoError("pgbackrest is not installed")
    if not path.exists():
        raise BackupInfoError(f"no pgBackRest configuration at {path}: run `paystream stack "
                              "up` (or set PAYSTREAM_PGBACKREST_CONFIG)")
    try:
        done = subprocess.run([exe, f"--config={path}", f"--stanza={STANZA}",
                               "--log-level-file=off", "--log-level-console=error",
                               "info", "--output=json"],
                              capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise BackupInfoError(f"pgbackrest info did not answer in {timeout_s:.0f} s") from exc
    if done.returncode != 0:
        raise BackupInfoError(f"pgbackrest info failed ({done.returncode}): "
                              f"{(done.stderr or done.stdout).strip()[:500]}")
    parsed = json.loads(done.stdout)
    return parsed if isinstance(parsed, list) else []


def parse_backups(info: list[dict[str, object]]) -> list[Backup]:
    """The stanza's backups, oldest first."""
    found: list[Backup] = []
    for stanza in info:
        if stanza.get("name") != STANZA:
            continue
        for b in stanza.get("backup", []) or []:  # type: ignore[attr-defined]
            ts, archive, sizes = b["timestamp"], b["archive"], b["info"]
            found.append(Backup(
                label=b["label"], type=b["type"],
                started=datetime.fromtimestamp(ts["start"], UTC),
                stopped=datetime.fromtimestamp(ts["stop"], UTC),
                wal_start=archive["start"], wal_stop=archive["stop"],
                size_bytes=int(sizes["size"]), repo_bytes=int(sizes["repository"]["delta"]),
                prior=b.get("prior")))
    return sorted(found, key=lambda b: b.stopped)


def backups(settings: BackupSettings | None = None) -> list[Backup]:
    """The repository's backups, oldest first (BackupInfoError when it cannot be read)."""
    return parse_backups(info_json(settings or BackupSettings.from_env()))


def newest(found: list[Backup]) -> Backup | None:
    return found[-1] if found else None


def archive_id(info: list[dict[str, object]]) -> str | None:
    """The stanza's current archive id (`15-1`: the server version and the database's
    history id in the repository), under which its WAL is filed."""
    for stanza in info:
        if stanza.get("name") == STANZA:
            archives = stanza.get("archive") or []
            return str(archives[-1]["id"]) if archives else None  # type: ignore[index]
    return None
