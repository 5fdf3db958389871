"""Debian packages the stack needs, installed when missing (we run as root on Debian)."""

from __future__ import annotations

import glob
import os
import shutil

from paystream.stack.process import StackError, run

_updated = False


def _apt_install(packages: list[str]) -> None:
    global _updated
    if os.geteuid() != 0:
        raise StackError("apt", f"missing {', '.join(packages)}; install them or run as root")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    if not _updated:
        run(["apt-get", "update", "-q"], "apt", env=env, timeout=600)
        _updated = True
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages], "apt",
        env=env, timeout=900)


def postgres_bin_dir() -> str | None:
    """The newest installed PostgreSQL server binaries (Debian keeps them off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[4]))
    return os.path.dirname(found[-1]) if found else None


def ensure_packages() -> list[str]:
    """Install what is missing; return the names installed (empty when all were there)."""
    wanted = []
    if postgres_bin_dir() is None:
        wanted.append("postgresql")
    if shutil.which("kcat") is None:
        wanted.append("kcat")
    if shutil.which("java") is None:
        wanted.append("openjdk-17-jre-headless")
    if shutil.which("mvn") is None:
        wanted.append("maven")
    if shutil.which("npm") is None:
        wanted.append("npm")  # anvil, the local Ethereum node, ships in the npm registry
    if shutil.which("promtool") is None:
        # promtool checks and unit-tests the alert rules; the server it ships with is
        # not used (and not started: we only need the tool).
        wanted.append("prometheus")
    if shutil.which("wrk") is None:
        wanted.append("wrk")  # the load generator of bench/ingest_bench.py at saturation
    if wanted:
        _apt_install(wanted)
    return wanted
