"""The product's folders, read from pyproject.toml's package-dir: the one list of them.

Tests that walk the product's source ask here instead of naming the folders again.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def package_dirs() -> dict[str, str]:
    """Import name -> source folder (relative to the repository root)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        mapping: dict[str, str] = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return mapping


def product_folders() -> tuple[str, ...]:
    """Every source folder the distribution is built from."""
    return tuple(package_dirs().values())
