"""The wheel the Docker image builds: `pip install .` on exactly the files the
Dockerfile's COPY lines take out of the build context, once .dockerignore is applied (no
Docker engine needed). Built once per test session, for every test that installs it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _pattern(line: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over context-relative paths: `*` and `?` stay
    within one path element, `**` spans any number of them (Docker's rules)."""
    out = ""
    i = 0
    while i < len(line):
        if line.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif line.startswith("**", i):
            out, i = out + ".*", i + 2
        elif line[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif line[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(line[i]), i + 1
    return re.compile(out)


def _ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        line = line.lstrip("!").strip("/")
        rules.append((keep, _pattern(str(PurePosixPath(line)))))
    return rules


def _ignored(rel: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """The last rule matching the path, or one of its parent folders, decides."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    verdict = False
    for keep, rule in rules:
        if any(rule.fullmatch(p) for p in prefixes):
            verdict = not keep
    return verdict


def context() -> list[str]:
    """The build context's files, context-relative, as `docker build .` would send them."""
    rules = _ignore_rules()
    files = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.is_file() and not _ignored(rel, rules):
            files.append(rel)
    return files


def _copies() -> list[tuple[str, str]]:
    """(source, destination) of each COPY line, the destination relative to WORKDIR."""
    copies = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            *sources, dest = words[1:]
            copies += [(s, dest) for s in sources]
    return copies


def lay_out_image(app: Path) -> None:
    """Copy into `app` (the WORKDIR) what the Dockerfile copies from the context."""
    files = context()
    for source, dest in _copies():
        src = source.removeprefix("./").strip("/").removeprefix(".")
        into_folder = dest.endswith("/") or dest in (".", "./")
        for rel in files:
            if not src or rel.startswith(src + "/"):
                target = app / dest / rel[len(src):].lstrip("/")
            elif rel == src:  # a file: into the folder, or to the name given
                target = app / dest / Path(rel).name if into_folder else app / dest
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, target)


# Session's temporary root -> its wheel: the tests that need it share one build.
_BUILT: dict[Path, tuple[Path, str]] = {}


def build_image_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel `pip install .` builds inside the image, and the build's output."""
    base = tmp_path_factory.getbasetemp()
    if base not in _BUILT:
        _BUILT[base] = _build(tmp_path_factory)
    return _BUILT[base]


def _build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    app = tmp_path_factory.mktemp("app")
    lay_out_image(app)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--wheel-dir", str(out), str(app)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = out.glob("paystream-*.whl")
    return wheel, built.stdout + built.stderr
