"""Each room of the product says what is in it: every package's docstring (its
__init__.py) names each of its modules and subpackages, so a newcomer reading a folder's
map finds every file, and a module added without a line in the map fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.parts import ROOT, product_folders


def packages() -> list[Path]:
    """Every Python package folder of the product, subpackages included."""
    found: list[Path] = []
    for folder in product_folders():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            if "__pycache__" not in init.parts:
                found.append(init.parent)
    return sorted(set(found))


def unnamed(package: Path) -> list[str]:
    """The package's modules and subpackages its docstring does not name."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    parts = [p.name for p in sorted(package.glob("*.py")) if p.name != "__init__.py"]
    parts += [p.name + "/" for p in sorted(package.iterdir())
              if p.is_dir() and (p / "__init__.py").exists()]
    return [name for name in parts if name not in doc]


@pytest.mark.parametrize("package", packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_package_docstring_maps_every_module(package: Path) -> None:
    assert unnamed(package) == [], (
        f"{package.relative_to(ROOT)}/__init__.py's docstring does not name these; add a"
        " line each saying what it holds")


def test_a_module_missing_from_the_map_is_found(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text('"""A room.\n\n  known.py   named\n"""\n')
    (tmp_path / "known.py").write_text("")
    (tmp_path / "stray.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    assert unnamed(tmp_path) == ["stray.py", "sub/"]
