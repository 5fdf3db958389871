"""Credentials the local stack generates and every process reads: one private folder of
secret files under the state dir.

`paystream stack up` creates each secret once (a random token, never a default) and the
processes read only the ones their role needs. Files are created with mode 0600 by the
open() itself and the folder with 0700, so no other user can read a secret even for the
moment between a write and a chmod. A secret is handed to a process as a file path (a
libpq passfile, a JAAS file) or read from its file, never on a command line, and never
printed.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from pydantic import Field

from paystream.env import EnvSettings, SettingsError

PROJECT_ROOT = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


class MissingSecretError(SettingsError):
    """A secret file that is not there: the stack was not brought up here, or the
    process looks in the wrong state dir."""


class StateSettings(EnvSettings):
    """Where the local stack keeps its state and the generated credentials; read by
    `paystream stack …` and by every process that looks up its own role's secrets. Two
    stacks can run side by side with another state folder and other ports: `make test`
    does so."""

    doc_section = "Local stack"

    state_dir: Path = Field(PROJECT_ROOT / ".stack", alias="PAYSTREAM_STATE_DIR",
                            json_schema_extra={"shown": "`.stack/` in the repository"},
                            description="data, jars, logs, pid files, dev secrets")
    secrets_dir: Path | None = Field(
        None, alias="PAYSTREAM_SECRETS_DIR",
        json_schema_extra={"shown": "`secrets/` in the state dir"},
        description="the generated credentials (files 0600 in a 0700 folder), read by each "
                    "process for its own role")


def state_dir() -> Path:
    """PAYSTREAM_STATE_DIR, else .stack/ in the repository."""
    return StateSettings.from_env().state_dir.resolve()


def secrets_dir() -> Path:
    """PAYSTREAM_SECRETS_DIR, else secrets/ in the state dir."""
    settings = StateSettings.from_env()
    explicit = settings.secrets_dir
    return explicit.resolve() if explicit else settings.state_dir.resolve() / "secrets"


def _path(name: str, directory: Path | None) -> Path:
    if not _NAME.match(name):
        raise ValueError(f"not a secret name: {name!r}")
    return (directory or secrets_dir()) / name


def write_private(path: Path, text: str, *, private_folder: bool = True) -> None:
    """Write `text` to `path`, readable by its owner only from the first byte: a fresh
    file opened 0600, then renamed over the old one (atomic), in a folder made 0700
    unless `private_folder` is False (a file of the state dir, which the postgres user
    must still traverse to reach the data dir)."""
    if private_folder:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def ensure_secret(name: str, directory: Path | None = None) -> str:
    """The secret called `name`, generated now if it does not exist yet."""
    path = _path(name, directory)
    if path.exists():
        return read_secret(name, directory)
    write_private(path, secrets.token_urlsafe(32) + "\n")
    return read_secret(name, directory)


def read_secret(name: str, directory: Path | None = None) -> str:
    path = _path(name, directory)
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        raise MissingSecretError(f"secret {path} does not exist: run `paystream stack up` "
                            "for this state dir (PAYSTREAM_STATE_DIR) first") from None
    if not value:
        raise MissingSecretError(f"secret {path} is empty")
    return value
