"""The Debian package names the stack manager asks for exist on Debian 12 and 13.

Both columns were read with `apt-cache policy NAME` on 2026-12-01: bookworm on our
Debian 12 machines, trixie in a Debian 13.8 chroot made with `debootstrap --variant=minbase
trixie`, where `openjdk-17-jre-headless` has no candidate. On whichever Debian the test
runs, it also asks that machine's apt for every name: evidence that does not come from
the code under test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from paystream.stack.packages import NEEDS, POSTGRES_PACKAGE

# name -> (bookworm candidate, trixie candidate)
ON_BOTH_RELEASES = {
    "postgresql": ("15+248+deb12u2", "17+278+deb13u1"),
    "kcat": ("1.7.1-2", "1.7.1-3"),
    "default-jre-headless": ("2:1.17-74 (OpenJDK 17)", "2:1.21-76 (OpenJDK 21)"),
    "maven": ("3.8.7-1", "3.9.9-1"),
    "npm": ("9.2.0~ds1-1", "9.2.0~ds1-3"),
    "prometheus": ("2.42.0+ds-5+deb12u1", "2.53.3+ds1-2"),
    "wrk": ("4.1.0-3+b2", "4.1.0-4+b1"),
    # bookworm read with apt-cache policy here (2026-12-07); trixie's from
    # packages.debian.org, not from a chroot. amtool is in the package (dpkg -L).
    "prometheus-alertmanager": ("0.25.0-1+b4", "0.28.1+ds-1"),
    "python3-venv": ("3.11.2-1+b1", "3.13.5-1"),  # the Makefile installs it
    # 2026-12-07: bookworm's with apt-cache policy here, trixie's from Debian's package
    # index (packages.debian.org, source pgbackrest), not from a chroot.
    "pgbackrest": ("2.45-1", "2.55.1-1"),
}

ROOT = Path(__file__).resolve().parents[2]


def asked_for() -> list[str]:
    return [POSTGRES_PACKAGE, *(n.package for n in NEEDS)]


def test_every_name_exists_on_debian_12_and_13() -> None:
    unknown = [name for name in asked_for() if name not in ON_BOTH_RELEASES]
    assert unknown == [], f"not checked on both releases: {unknown}"
    # Trixie dropped this one; it must never come back.
    assert "openjdk-17-jre-headless" not in asked_for()


def test_the_makefile_installs_python3_venv_by_a_name_on_both_releases() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "python3-venv" in makefile


def test_the_venv_is_made_with_the_distributions_python3_where_there_is_one() -> None:
    # Debian's python3 is an optimized build, a pyenv one first on PATH may not be (see
    # the Makefile); `make` must pick Debian's without being told.
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    out = subprocess.run(["make", "-s", "--no-print-directory", "--eval",
                          "print-python: ; @echo $(PYTHON)", "print-python"],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    expected = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3"
    assert out.stdout.strip() == expected


def test_this_machines_apt_knows_every_name() -> None:
    if not Path("/etc/debian_version").exists() or shutil.which("apt-cache") is None:
        return  # not Debian: the table above is the only evidence
    lists = list(Path("/var/lib/apt/lists").glob("*_Packages*"))
    assert lists, "no apt package lists on this Debian machine: run `apt-get update`"
    for name in [*asked_for(), "python3-venv"]:
        out = subprocess.run(["apt-cache", "policy", name], capture_output=True,
                             text=True, check=True).stdout
        assert "Candidate:" in out and "Candidate: (none)" not in out, \
            f"apt on this machine has no candidate for {name}:\n{out}"
