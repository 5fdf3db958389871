"""The Docker image runs `pip install .` on what its Dockerfile copies: that wheel must
build, carry the data files the code reads at run time (the migrations, Connect's and
Kafka's configuration, the connector's pom.xml, the alert rules), and import as a whole.

The wheel is built from exactly the files the Dockerfile's COPY lines take out of the
build context, once .dockerignore is applied, so a product folder the image leaves out
fails here (no Docker engine needed)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.image import ROOT, build_image_wheel, context

# Source folder -> where its files land in the wheel, and which of them are data.
DATA = {
    "schema/migrations": ("paystream/schema/migrations", "*.sql"),
    "connectors/config": ("paystream/connectors/config", "*"),
    "ops/prometheus": ("paystream/ops/prometheus", "*.yml"),
}


@pytest.fixture(scope="module")
def image_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return build_image_wheel(tmp_path_factory)


def test_the_context_leaves_out_what_the_image_does_not_ship() -> None:
    files = context()
    assert "pyproject.toml" in files and "schema/migrations/0001_core.sql" in files
    for left_out in ("tests/", "bench/", "docs/", ".git/", ".venv/", ".stack"):
        assert not [f for f in files if f.startswith(left_out)], left_out
    assert not [f for f in files if "__pycache__" in f]


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
