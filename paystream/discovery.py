"""Finding the modules a feature declares something in, by their name, under an import
root: the ledger's consequences (`*_consequence`, paystream/ledger_consequences.py) and
the console's pages (`console_routes`, console/pages.py). A feature adds a module of
that name to its own folder, and no list names it.

The walk imports each package on the way (its `__init__`), never the modules it names:
the caller imports those it wants.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType


def modules_named(roots: Sequence[str], wanted: Callable[[str], bool]) -> list[str]:
    """Every module under the packages `roots` whose own name (the last part of its
    dotted name) is `wanted`, sorted by dotted name, each once."""
    return sorted({name for root in roots for name in modules_under(root)
                   if wanted(name.rpartition(".")[2])})


def modules_under(root: str) -> Iterator[str]:
    """The name of every module and package under the package `root`, itself included."""
    package = importlib.import_module(root)
    yield root
    for info in pkgutil.iter_modules(package.__path__, root + "."):
        if not info.ispkg:
            yield info.name
    for name in _subpackages(package):
        yield from modules_under(name)


def _subpackages(package: ModuleType) -> list[str]:
    """The packages the import system resolves as `package`'s children: the folders
    inside its own (an installed wheel), and the folders beside it that an editable
    install of the source checkout maps onto it (pyproject.toml's package-dir), each
    kept only if `package.<folder>` imports from that very folder."""
    names: list[str] = []
    for folder in map(Path, package.__path__):
        for place in (folder, folder.parent):
            for child in sorted(place.iterdir()):
                name = f"{package.__name__}.{child.name}"
                if (name in names or not child.name.isidentifier()
                        or not (child / "__init__.py").is_file()):
                    continue
                spec = importlib.util.find_spec(name)
                if (spec is not None and spec.submodule_search_locations
                        and Path(spec.submodule_search_locations[0]).resolve()
                        == child.resolve()):
                    names.append(name)
    return names
