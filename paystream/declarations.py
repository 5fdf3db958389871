"""Declarations found without a list naming them: a part declares what it adds as a
module-level constant of a module of its own, and the command that runs it finds every
such module under the packages it searches (`found`), the product's and those `also`
names (a test's own). Its users: the ledger's consequences
(paystream/ledger_consequences.py) and the ingest's webhook providers
(ingest/registry.py).

A module chosen as a declaration's that declares none refuses to start
(DeclarationError, a SettingsError: exit 2), as does every rule a user adds on what it
finds (a name declared twice, ...).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Generic, TypeVar

from paystream.env import SettingsError

T = TypeVar("T")


@dataclass(frozen=True)
class Found(Generic[T]):
    """A declaration and the module that made it (for the messages)."""

    module: str
    declared: T


class DeclarationError(SettingsError):
    """What is declared cannot run together; the message names the modules."""


def found(roots: Sequence[str], *, chosen: Callable[[str], bool], attribute: str,
          kind: type[T], chosen_as: str, see: str) -> list[Found[T]]:
    """The `attribute` of every module under the packages `roots` that `chosen` picks
    (by its full name), in the order of the modules' names; DeclarationError for a
    chosen module whose `attribute` is not a `kind` (`chosen_as` and `see` say why it
    was chosen and where the rules are)."""
    modules = sorted({name for root in roots for name in modules_under(root)
                      if chosen(name)})
    declarations = []
    for name in modules:
        declared = getattr(importlib.import_module(name), attribute, None)
        if not isinstance(declared, kind):
            raise DeclarationError(
                f"{name} is named as {chosen_as} but declares no {attribute} ="
                f" {kind.__name__}(...) ({see})")
        declarations.append(Found(name, declared))
    return declarations


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
