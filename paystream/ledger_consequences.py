"""How a feature declares its ledger consequence, and how the composition root finds them.

A ledger consequence (consumers/ledger/consequences.py) is declared where its feature
lives, in a module whose name ends in `_consequence`, as a module-level

    CONSEQUENCE = Declared("invoices", InvoicePayments, after=("chain_deposits",))

`build` makes it at start-up (reading its settings, making its sealer: never in the batch
path); `after` names the consequences it runs after; `last` says it runs after every
other (the notifications: they send what the others told). `paystream consume ledger`
(paystream/consume.py `ledger_handler`) finds every declaration under the `paystream`
import root (`found`, by paystream/discovery.py's walk), orders them (`in_order`: among
those free to run, by name, so every process runs one order) and builds them: a new
consequence is a module of its feature's folder, and no other file names it.

A declaration that cannot be ordered refuses to start (DeclarationError, exit 2): a
name declared twice, `after` a name nobody declares, two that run last, a cycle, or a
`_consequence` module that declares nothing.

This module sits below the features (.importlinter's layers), so invoices/ and notify/
import it as the ledger does; it imports none of them but by name, at start-up.
"""

from __future__ import annotations

import heapq
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from paystream.discovery import modules_named
from paystream.env import SettingsError

if TYPE_CHECKING:
    from paystream.schema.db import Cursor

SUFFIX = "_consequence"  # the modules that declare one
ATTRIBUTE = "CONSEQUENCE"
PRODUCT = ("paystream",)  # where `paystream consume ledger` looks


class Writer(Protocol):
    """A consequence as its feature sees it: the ledger hands `write` its AppliedBatch
    (consumers/ledger/consequences.py), which each feature types by what it reads."""

    name: str

    def write(self, cur: Cursor, batch: Any) -> None: ...


@dataclass(frozen=True)
class Declared:
    name: str
    build: Callable[[], Writer]
    after: tuple[str, ...] = ()
    last: bool = False


@dataclass(frozen=True)
class Found:
    """A declaration and the module that made it (for the messages)."""

    module: str
    declared: Declared


class DeclarationError(SettingsError):
    """The declared consequences cannot be ordered; the message names the modules."""


def build(also: Sequence[str] = ()) -> list[Writer]:
    """Every declared consequence, in order, built: under the product's import root and
    the packages `also` names (a test's own)."""
    writers = []
    for declaration in in_order(found((*PRODUCT, *also))):
        writer = declaration.build()
        if writer.name != declaration.name:
            raise DeclarationError(f"ledger consequence {declaration.name!r} built one named"
                                   f" {writer.name!r}")
        writers.append(writer)
    return writers


def found(roots: Sequence[str]) -> list[Found]:
    """The declaration of every `*_consequence` module under the packages `roots`."""
    modules = modules_named(roots, lambda own: own.endswith(SUFFIX))
    declarations = []
    for name in modules:
        declared = getattr(importlib.import_module(name), ATTRIBUTE, None)
        if not isinstance(declared, Declared):
            raise DeclarationError(
                f"{name} is named as a ledger consequence's module (*{SUFFIX}) but declares"
                f" no {ATTRIBUTE} = Declared(...) (paystream/ledger_consequences.py)")
        declarations.append(Found(name, declared))
    return declarations


def in_order(declarations: Sequence[Found]) -> list[Declared]:
    """The declarations in the order they run: each after the ones it names, the last
    one last, and otherwise by name. DeclarationError if there is no such order."""
    where: dict[str, str] = {}
    for f in declarations:
        if f.declared.name in where:
            raise DeclarationError(f"ledger consequence {f.declared.name!r} is declared twice:"
                                   f" in {where[f.declared.name]} and in {f.module}")
        where[f.declared.name] = f.module
    last = [f for f in declarations if f.declared.last]
    if len(last) > 1:
        raise DeclarationError("ledger consequences " + " and ".join(
            f"{f.declared.name!r} ({f.module})" for f in last) + " both run last")
    waits_for: dict[str, set[str]] = {}
    for f in declarations:
        unknown = [name for name in f.declared.after if name not in where]
        if unknown:
            raise DeclarationError(f"ledger consequence {f.declared.name!r} ({f.module}) runs"
                                   f" after {', '.join(map(repr, unknown))}, which no module"
                                   " declares")
        waits_for[f.declared.name] = set(f.declared.after)
    for f in last:
        waits_for[f.declared.name] |= set(where) - {f.declared.name}
    by_name = {f.declared.name: f.declared for f in declarations}
    return [by_name[name] for name in _sorted(waits_for)]


def _sorted(waits_for: dict[str, set[str]]) -> list[str]:
    """The names, each after those it waits for; among those free to run, by name."""
    waiting = {name: set(before) for name, before in waits_for.items()}
    ready = [name for name, before in waiting.items() if not before]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        name = heapq.heappop(ready)
        order.append(name)
        for other, before in waiting.items():
            if name in before:
                before.discard(name)
                if not before:
                    heapq.heappush(ready, other)
    stuck = sorted(name for name in waiting if name not in order)
    if stuck:
        raise DeclarationError("ledger consequences that wait for each other (a cycle): "
                               + ", ".join(f"{name!r} after {sorted(waiting[name])}"
                                           for name in stuck))
    return order

