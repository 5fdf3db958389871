"""Continuous archiving and backups of the stack's cluster with pgBackRest (Debian's
`pgbackrest`), configured by `paystream stack up`.

- The configuration, the repository (standing for off-host storage), pgBackRest's logs,
  locks and spool live under <state_dir>/pgbackrest/, owned by the `postgres` OS user
  that runs the cluster (pgBackRest must run as the data dir's owner), folders 0700,
  the configuration 0600.
- The repository is encrypted (aes-256-cbc) with a key generated once into the secrets
  folder (`pgbackrest-cipher`, 0600); the configuration file carries a copy, since
  archive-push runs as `postgres`, which may not enter the secrets folder.
- WAL is archived from the server's first start: archive_mode and archive_command are
  given on the server's command line (server_options), not in its configuration files,
  so a backup carries neither and a restored copy never pushes into this repository.
- `stack up` creates the stanza (idempotent), checks that a WAL segment reaches the
  repository (`pgbackrest check`) and takes a first full backup when there is none.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
from pathlib import Path

from paystream import backups, credentials
from paystream.backups import STANZA, BackupSettings
from paystream.stack.process import StackError, run
from paystream.stack.settings import StackSettings

COMPONENT = "pgbackrest"
OS_USER = "postgres"
BACKUP_TYPES = ("full", "diff", "incr")


def home(s: StackSettings) -> Path:
    return s.state_dir / "pgbackrest"


def repo_path(s: StackSettings) -> Path:
    return home(s) / "repo"


def log_dir(s: StackSettings) -> Path:
    return home(s) / "log"


def config_path(settings: BackupSettings) -> Path:
    return settings.config_path


def archive_command(settings: BackupSettings) -> str:
    """pg1-path is the archiving server's own folder (Postgres runs the command there):
    with a standby either node archives once it is the primary, the other's folder
    possibly gone (docs/operations.md#a-standby-and-failover)."""
    return (f"pgbackrest --config={shlex.quote(str(config_path(settings)))}"
            f' --stanza={STANZA} --pg1-path="$(pwd -P)" archive-push %p')


# Given to the live server only, at every start (postgres.start): see the docstring.
def server_settings(settings: BackupSettings) -> dict[str, str]:
    return {"archive_mode": "on", "archive_command": archive_command(settings),
            # A segment is archived at least every minute on a quiet database, so the
            # newest restorable moment is never older than that.
            "archive_timeout": "60s"}


def config_text(s: StackSettings, settings: BackupSettings, cipher_pass: str,
                standby: tuple[Path, int] | None = None) -> str:
    h = home(s)
    return "\n".join([
        "# Written by `paystream stack up` (stack/backup.py); rewritten at every up.",
        "[global]",
        f"repo1-path={repo_path(s)}",
        "repo1-cipher-type=aes-256-cbc",
        f"repo1-cipher-pass={cipher_pass}",
        f"repo1-retention-full={settings.retention_full}",
        f"repo1-retention-diff={settings.retention_diff}",
        # lz4: a fraction of gzip's CPU on a shared 2-core machine, for ~2x larger files.
        "compress-type=lz4",
        # A checkpoint at once when a backup starts, not at the next scheduled one
        # (checkpoint_timeout is 15 min).
        "start-fast=y",
        f"log-path={log_dir(s)}",
        f"lock-path={h / 'lock'}",  # per stack: two stacks' stanzas never share a lock
        f"spool-path={h / 'spool'}",
        "log-level-console=warn",
        "log-level-file=info",
        "",
        f"[{STANZA}]",
        *(line for n, (path, port) in enumerate(_nodes(s, standby), 1) for line in (
            f"pg{n}-path={path}", f"pg{n}-port={port}", f"pg{n}-socket-path=/tmp",
            f"pg{n}-user={OS_USER}")),
        "",
    ])


def _nodes(s: StackSettings, standby: tuple[Path, int] | None) -> list[tuple[Path, int]]:
    """The stanza's servers: the stack's cluster, and the standby's (folder, port) when
    there is one, so `backup` and `check` find whichever is the primary. With a standby
    pg_data is a symlink to node1's folder (stack/standby.py): pgBackRest wants the
    server's data_directory itself."""
    nodes = [(s.pg_data.resolve() if s.pg_data.is_symlink() else s.pg_data, s.pg_port)]
    return nodes if standby is None else [*nodes, standby]


def ensure_config(s: StackSettings, settings: BackupSettings,
                  standby: tuple[Path, int] | None = None) -> bool:
    """The folders and the configuration (the key generated once); `standby`: node2's
    folder and port (stack/standby.py owns them). True if the file changed."""
    pw = pwd.getpwnam(OS_USER)
    cipher = credentials.ensure_secret(backups.CIPHER_SECRET)
    for folder in (home(s), repo_path(s), log_dir(s), home(s) / "lock", home(s) / "spool"):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(folder, pw.pw_uid, pw.pw_gid)
        os.chmod(folder, 0o700)
    path = config_path(settings)
    text = config_text(s, settings, cipher, standby)
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    credentials.write_private(path, text, private_folder=False)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    return True


def pgbackrest(settings: BackupSettings, *args: str, timeout: float = 3600) -> str:
    """pgBackRest as the cluster's owner with this stack's configuration; its output."""
    exe = shutil.which("pgbackrest")
    if exe is None:
        raise StackError(COMPONENT, "pgbackrest is not installed (`paystream stack up` "
                         "installs it)")
    return run(["runuser", "-u", OS_USER, "--", exe, f"--config={config_path(settings)}",
                f"--stanza={STANZA}", *args], COMPONENT, timeout=timeout)


def ensure_stanza(settings: BackupSettings) -> bool:
    """stanza-create (a no-op on a valid stanza), then `check`: a WAL switch whose
    segment must reach the repository. True when the stanza was created now."""
    out = pgbackrest(settings, "--log-level-console=info", "stanza-create", timeout=300)
    pgbackrest(settings, "check", timeout=300)
    return "already exists" not in out


def ensure_first_backup(settings: BackupSettings) -> str | bool:
    """A full backup when the repository holds none (archived WAL alone restores
    nothing): its label, or False when there is one already."""
    if not settings.first_at_up:
        return "skipped (PAYSTREAM_BACKUP_AT_UP=0)"
    if backups.backups(settings):
        return False
    return take(settings, "full").label


def take(settings: BackupSettings, backup_type: str) -> backups.Backup:
    """One backup (full, diff or incr; a diff or incr with no full before it is taken as
    a full by pgBackRest); the newest backup after it. Expiry by the retention follows."""
    if backup_type not in BACKUP_TYPES:
        raise ValueError(f"backup type {backup_type!r}: one of {', '.join(BACKUP_TYPES)}")
    pgbackrest(settings, "backup", f"--type={backup_type}")
    found = backups.backups(settings)
    if not found:
        raise StackError(COMPONENT, "backup finished but `pgbackrest info` lists none")
    return found[-1]


def missing_wal(settings: BackupSettings, first: str, last: str) -> list[str]:
    """The WAL segments from `first` to `last` (inclusive) the repository lacks, asked of
    the repository itself (`pgbackrest repo-ls`, any repository type). Across a failover
    `last` is on a later timeline: a position counts as present when a segment of any
    timeline from `first`'s to `last`'s holds it (the switch point's has both)."""
    archive = backups.archive_id(backups.info_json(settings))
    wanted = segment_range(first, last)
    if archive is None:
        return wanted
    timelines = [f"{tli:08X}" for tli in range(int(first[:8], 16), int(last[:8], 16) + 1)]
    present: set[str] = set()
    for folder in sorted({tli + name[8:16] for name in wanted for tli in timelines}):
        listing = json.loads(pgbackrest(settings, "--log-level-file=off", "repo-ls",
                                        f"archive/{STANZA}/{archive}/{folder}",
                                        "--output=json", timeout=120))
        present |= {name[8:24] for name, entry in listing.items()
                    if entry.get("type") == "file" and len(name) > 24 and name[24] == "-"}
    return [name for name in wanted if name[8:] not in present]


def next_segment(name: str) -> str:
    """The WAL segment after `name` (16 MiB segments: 256 per log id)."""
    tli, log, seg = int(name[:8], 16), int(name[8:16], 16), int(name[16:], 16)
    log, seg = (log + 1, 0) if seg == 0xFF else (log, seg + 1)
    return f"{tli:08X}{log:08X}{seg:08X}"


def segment_range(first: str, last: str) -> list[str]:
    """The segments from `first`'s position to `last`'s, inclusive, named on `first`'s
    timeline: positions, not names, are compared (`last` may be on a later timeline,
    whose names sort after every one of `first`'s)."""
    found = [first]
    while found[-1][8:] < last[8:]:
        found.append(next_segment(found[-1]))
    return found
