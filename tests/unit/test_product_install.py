"""A product install: the image's wheel, `pip install`ed into a fresh venv without any
extra, must import as a whole and answer `--help` for every command the `paystream`
parser registers (read from the parser, so a new command is covered). `paystream chaos`
needs the `chaos` extra: without it, it says what to install and exits 2 before it
touches any stack.

pip reaches PyPI for the dependencies (its cache makes later runs cheap)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from paystream.cli import build_parser
from tests.support.image import build_image_wheel


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
              ) -> Iterator[tuple[str, ...]]:
    """Every command and subcommand the parser accepts, as the words that name it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name)
                yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(build_parser()))


@pytest.fixture(scope="module")
def product(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The venv's bin folder, and the modules its wheel holds."""
    wheel, _ = build_image_wheel(tmp_path_factory)
    venv = tmp_path_factory.mktemp("product") / "venv"
    # No pip inside the venv: the test's own installs into it (`--python`), which saves
    # bootstrapping one; no bytecode compiled either (the imports below compile what
    # they use). Nothing of the test's venv is visible from the new one.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                   check=True, timeout=60)
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--quiet", "--disable-pip-version-check", "--no-compile", str(wheel)],
        capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    with zipfile.ZipFile(wheel) as archive:
        modules = sorted(n[:-3].replace("/", ".").removesuffix(".__init__")
                         for n in archive.namelist() if n.endswith(".py"))
    return venv / "bin", modules


def _run(bin_dir: Path, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command of the venv's, from a folder that is not the checkout, no PYTHONPATH."""
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_the_product_venv_holds_no_dev_or_chaos_package(
        product: tuple[Path, list[str]], tmp_path: Path) -> None:
    bin_dir, _ = product
    script = ("import importlib.util as u\n"
              "print([m for m in ('pytest', 'standardwebhooks', 'hypothesis')"
              " if u.find_spec(m)])")
    done = _run(bin_dir, tmp_path, str(bin_dir / "python"), "-c", script)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_every_module_of_the_wheel_imports_in_a_product_install(
        product: tuple[Path, list[str]], tmp_path: Path) -> None:
    bin_dir, modules = product
    assert "paystream.chaos.receiver" in modules and "paystream.cli" in modules
    script = ("import importlib, sys\n"
              "for name in sys.argv[1:]:\n"
              "    module = importlib.import_module(name)\n"
              "    assert module.__file__.startswith(sys.prefix), (name, module.__file__)\n")
    done = _run(bin_dir, tmp_path, str(bin_dir / "python"), "-c", script, *modules)
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_command_answers_help_in_a_product_install(
        product: tuple[Path, list[str]], tmp_path: Path) -> None:
    bin_dir, _ = product
    assert ("chaos",) in COMMANDS and ("stack", "up") in COMMANDS
    # Each command in a process of its own, a few at a time (they wait on imports).
    every = [(), *COMMANDS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda words: _run(bin_dir, tmp_path, "paystream", *words,
                                                "--help"), every))
    failed = {" ".join(words): (done.returncode, done.stderr[-500:])
              for words, done in zip(every, runs, strict=True)
              if done.returncode != 0 or "usage: paystream" not in done.stdout}
    assert not failed, failed


def test_chaos_without_its_extra_names_it_and_exits_2(
        product: tuple[Path, list[str]], tmp_path: Path) -> None:
    bin_dir, _ = product
    done = _run(bin_dir, tmp_path, "paystream", "chaos", "--short")
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("paystream chaos: ") and "pip install 'paystream[chaos]'" in line
