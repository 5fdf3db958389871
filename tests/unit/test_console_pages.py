"""The console's pages are found in their features' folders (console/pages.py): every
`console_routes` module under the import root, in the order of their names; one without a
router, a route two modules declare, or a template name in two folders refuse to start."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from fastapi import APIRouter

from paystream.console import pages
from paystream.console.app import ROUTERS
from paystream.console_kit import web
from tests.support.ids import unique

FEATURES = {"paystream.api.console_routes", "paystream.consumers.dead_letters.console_routes",
            "paystream.consumers.ledger.console_routes", "paystream.notify.console_routes",
            "paystream.statements.console_routes"}


def _package(root: Path, files: dict[str, str]) -> str:
    """A package of its own under `root` (on sys.path), holding `files`."""
    name = unique("pages_pkg").replace("-", "_")
    for path, text in {"__init__.py": "", **files}.items():
        (root / name / path).parent.mkdir(parents=True, exist_ok=True)
        (root / name / path).write_text(text)
    return name


def _module(name: str, *paths: str) -> ModuleType:
    module = ModuleType(name)
    module.router = APIRouter()  # type: ignore[attr-defined]
    for path in paths:
        module.router.add_api_route(path, lambda: None, methods=["GET"])  # type: ignore[attr-defined]
    return module


def test_every_features_pages_are_found_in_the_order_of_their_names() -> None:
    names = [m.__name__ for m in pages.found()]
    assert names == sorted(names) and set(names) == FEATURES
    assert [m.__name__ for m in ROUTERS][-len(FEATURES):] == names


def test_a_console_routes_module_without_a_router_refuses_to_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    root = _package(tmp_path, {"feature/__init__.py": "",
                               "feature/console_routes.py": "ROUTER = None\n"})
    with pytest.raises(pages.PagesError, match=rf"{root}\.feature\.console_routes .* no"
                                               r" router"):
        pages.found((root,))


def test_a_route_two_modules_declare_refuses_to_start() -> None:
    one, other = _module("one", "/a", "/b"), _module("other", "/c", "/b")
    pages.refuse_duplicates([one, _module("third", "/d")])
    with pytest.raises(pages.PagesError, match="GET /b is declared twice: in one and in other"):
        pages.refuse_duplicates([one, other])


def test_a_template_name_in_two_folders_refuses_to_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = _package(tmp_path, {"templates/mine.html": "x"})
    assert "mine.html" in web.templates((mine,)).list_templates()
    clash = _package(tmp_path, {"templates/base.html": "x"})
    with pytest.raises(web.DuplicateTemplateError,
                       match=rf"'base.html' is in paystream.console_kit's templates/ and in"
                             rf" {clash}'s"):
        web.templates((clash,))


def test_only_packages_with_a_templates_folder_are_searched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    kept = _package(tmp_path, {"templates/page.html": "x"})
    bare = _package(tmp_path, {})
    assert pages.template_packages([ModuleType(f"{kept}.console_routes"),
                                    ModuleType(f"{bare}.console_routes"),
                                    ModuleType(f"{kept}.other")]) == [kept]
