"""How a feature's console pages are found: each feature declares its routes in a module
of its own folder named `console_routes`, as a module-level

    router = APIRouter()

and keeps the templates they render in a `templates/` folder beside it. The app
(app.py) finds every such module under the `paystream` import root (`found`, as
paystream/declarations.py finds declarations, in the order of their dotted names, so every process
serves one routing table): a new feature's pages are a module and a folder of its own,
and no other file names them.

A declaration that cannot be served refuses to start (PagesError, exit 2): a
`console_routes` module that declares no router, or a method and path two routers both
declare (which one answered would depend on their order). A template name in two
folders is refused too (console_kit/web.py `templates`).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from importlib import resources
from types import ModuleType

from fastapi import APIRouter
from fastapi.routing import APIRoute

from paystream import declarations
from paystream.declarations import DeclarationError

MODULE = "console_routes"  # the modules that declare a feature's pages
ATTRIBUTE = "router"
PRODUCT = ("paystream",)  # where the console looks


class PagesError(DeclarationError):
    """The declared pages cannot be served; the message names the modules."""


def found(roots: Sequence[str] = PRODUCT) -> list[ModuleType]:
    """Every `console_routes` module under the packages `roots`, imported, by name."""
    try:
        made = declarations.found(
            roots, chosen=lambda name: name.rpartition(".")[2] == MODULE,
            attribute=ATTRIBUTE, kind=APIRouter,
            chosen_as=f"a feature's console pages ({MODULE})", see="console/pages.py")
    except DeclarationError as exc:
        raise PagesError(str(exc)) from exc
    return [importlib.import_module(f.module) for f in made]


def refuse_duplicates(modules: Sequence[ModuleType]) -> None:
    """PagesError if two of the modules' routers declare one method on one path."""
    where: dict[tuple[str, str], str] = {}
    for module in modules:
        for route in getattr(module, ATTRIBUTE).routes:
            methods = (route.methods or set()) if isinstance(route, APIRoute) else set()
            for method in sorted(methods):
                if (method, route.path) in where:
                    raise PagesError(f"{method} {route.path} is declared twice: in"
                                     f" {where[method, route.path]} and in {module.__name__}")
                where[method, route.path] = module.__name__


def template_packages(modules: Sequence[ModuleType]) -> list[str]:
    """The packages of the modules that keep templates (a `templates/` folder)."""
    packages = [module.__name__.rpartition(".")[0] for module in modules]
    return [p for p in dict.fromkeys(packages)
            if resources.files(p).joinpath("templates").is_dir()]
