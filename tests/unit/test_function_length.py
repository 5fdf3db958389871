"""No function of the product is longer than a screen and a half: 80 lines, its
decorators and docstring included (`make lint` runs this test too). The product is every
folder pyproject's package-dir maps onto the `paystream` import root."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 80


def _product_files() -> list[Path]:
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    return sorted(p for folder in set(dirs.values()) for p in (ROOT / folder).rglob("*.py"))


def long_functions(source: str, limit: int = LIMIT) -> list[tuple[str, int]]:
    """(name, lines) of each function in `source` longer than `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > limit:
                found.append((node.name, length))
    return found


def test_the_check_counts_a_long_function_and_its_decorators() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT - 2))
    assert long_functions(f"def fits():\n{body}\n") == []
    assert long_functions(f"@decorated\ndef long():\n{body}\n    return x0\n") == [
        ("long", LIMIT + 1)]


def test_no_product_function_is_longer_than_the_limit() -> None:
    files = _product_files()
    assert len(files) > 200, "the product's folders were not read"
    too_long = [f"{p.relative_to(ROOT)}: {name} ({lines} lines)" for p in files
                for name, lines in long_functions(p.read_text())]
    assert too_long == [], "split these into functions of at most 80 lines:\n" + \
        "\n".join(too_long)
