"""Debian packages the stack needs, installed when missing (we run as root on Debian).

Each package is named so that the same name exists on Debian 12 (bookworm) and 13
(trixie): `default-jre-headless` is Java 17 on bookworm and 21 on trixie, and trixie has
no `openjdk-17-jre-headless`. tests/unit/test_stack_packages.py checks the names.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass

from paystream.stack.process import StackError, run

_updated = False


@dataclass(frozen=True)
class Need:
    """A Debian package, wanted when `command` is not on PATH."""

    command: str
    package: str
    why: str


# PostgreSQL is probed separately: Debian keeps its server binaries off PATH.
NEEDS = (
    Need("kcat", "kcat", "topic inspection, the README's recipes"),
    Need("java", "default-jre-headless", "Kafka (KRaft), Kafka Connect and Debezium"),
    Need("mvn", "maven", "resolves the Kafka, Connect and Debezium jars (connectors/pom.xml)"),
    Need("npm", "npm", "anvil, the local Ethereum node, ships in the npm registry"),
    # promtool checks and unit-tests the alert rules; the server it ships with runs
    # when asked (`stack up --prometheus`, stack/prometheus.py).
    Need("promtool", "prometheus", "the alert rules' checks and tests; the Prometheus server"),
    # Alertmanager routes Prometheus's alerts to people (stack/alertmanager.py); amtool,
    # in the same package, checks its configuration and drives silences.
    Need("amtool", "prometheus-alertmanager", "routes the alerts to a pager, chat, email"),
    Need("wrk", "wrk", "the load generator of bench/ingest_bench.py at saturation"),
    Need("pgbackrest", "pgbackrest", "WAL archiving, backups and restores (stack/backup.py)"),
)
POSTGRES_PACKAGE = "postgresql"
APT_LOCK_WAIT_S = 300


def _apt_install(packages: list[str]) -> None:
    global _updated
    if os.geteuid() != 0:
        raise StackError("apt", f"missing {', '.join(packages)}; install them or run as root")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    # Another apt (a second stack coming up, unattended upgrades) holding dpkg's lock is
    # waited for, not a failure: apt refuses at once without this.
    lock = ["-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}"]
    if not _updated:
        run(["apt-get", *lock, "update", "-q"], "apt", env=env, timeout=600)
        _updated = True
    run(["apt-get", *lock, "install", "-y", "-q", "--no-install-recommends", *packages],
        "apt", env=env, timeout=900)


def install_package(package: str) -> None:
    """One package a component installs only when it is asked for (PgBouncer)."""
    _apt_install([package])


def postgres_bin_dir() -> str | None:
    """The newest installed PostgreSQL server binaries (Debian keeps them off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


def missing_packages() -> list[str]:
    """The Debian packages whose programs this machine lacks."""
    wanted = [] if postgres_bin_dir() is not None else [POSTGRES_PACKAGE]
    return wanted + [n.package for n in NEEDS if shutil.which(n.command) is None]


def ensure_packages() -> list[str]:
    """Install what is missing; return the names installed (empty when all were there)."""
    wanted = missing_packages()
    if wanted:
        _apt_install(wanted)
    return wanted
