"""The Docker image runs `pip install .` on what its Dockerfile copies: that wheel must
build, carry the data files the code reads at run time (the migrations, Connect's and
Kafka's configuration, the connector's pom.xml, the alert rules), and import as a whole.

The wheel is built from exactly the files the Dockerfile's COPY lines take out of the
build context, once .dockerignore is applied, so a product folder the image leaves out
fails here (no Docker engine needed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Source folder -> where its files land in the wheel, and which of them are data.
DATA = {
    "schema/migrations": ("paystream/schema/migrations", "*.sql"),
    "connectors/config": ("paystream/connectors/config", "*"),
    "ops/prometheus": ("paystream/ops/prometheus", "*.yml"),
}


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


def _context() -> list[str]:
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
    context = _context()
    for source, dest in _copies():
        src = source.removeprefix("./").strip("/").removeprefix(".")
        into_folder = dest.endswith("/") or dest in (".", "./")
        for rel in context:
            if not src or rel.startswith(src + "/"):
                target = app / dest / rel[len(src):].lstrip("/")
            elif rel == src:  # a file: into the folder, or to the name given
                target = app / dest / Path(rel).name if into_folder else app / dest
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, target)


@pytest.fixture(scope="module")
def image_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The wheel `pip install .` builds inside the image, and the build's output."""
    app = tmp_path_factory.mktemp("app")
    lay_out_image(app)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--wheel-dir", str(out), str(app)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = out.glob("paystream-*.whl")
    return wheel, built.stdout + built.stderr


def test_the_context_leaves_out_what_the_image_does_not_ship() -> None:
    context = _context()
    assert "pyproject.toml" in context and "schema/migrations/0001_core.sql" in context
    for left_out in ("tests/", "bench/", "docs/", ".git/", ".venv/", ".stack"):
        assert not [f for f in context if f.startswith(left_out)], left_out
    assert not [f for f in context if "__pycache__" in f]


def test_the_wheel_carries_every_data_file_and_setuptools_warns_of_no_missing_package(
        image_wheel: tuple[Path, str]) -> None:
    wheel, output = image_wheel
    # setuptools installs a folder it was not told about only while a deprecation lasts.
    assert "absent from the `packages` configuration" not in output
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for source, (target, pattern) in DATA.items():
        files = sorted(p.name for p in (ROOT / source).glob(pattern) if p.is_file())
        assert files, source
        missing = [f for f in files if f"{target}/{f}" not in names]
        assert not missing, (source, missing)
    assert "paystream/connectors/pom.xml" in names


def test_every_module_of_the_image_wheel_imports_from_it(
        image_wheel: tuple[Path, str], tmp_path: Path) -> None:
    wheel, _ = image_wheel
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
        modules = sorted(n[:-3].replace("/", ".").removesuffix(".__init__")
                         for n in archive.namelist() if n.endswith(".py"))
    # Every folder pyproject maps must have reached the wheel.
    from tests.support.parts import package_dirs
    for package in package_dirs():
        assert package in modules, package
    # PYTHONPATH comes before the editable install's finder, and the working folder is
    # not the checkout: the wheel's copy is imported.
    script = ("import importlib, sys\n"
              f"site = {str(site)!r}\n"
              "for name in sys.argv[1:]:\n"
              "    module = importlib.import_module(name)\n"
              "    assert module.__file__.startswith(site), (name, module.__file__)\n")
    done = subprocess.run([sys.executable, "-c", script, *modules],
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
