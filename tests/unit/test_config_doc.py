"""docs/configuration.md is what the settings declarations generate, and every
declaration is on it once."""

from __future__ import annotations

import ast
from pathlib import Path

from paystream.config_doc import SETTINGS, render
from tests.support.parts import product_folders

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"


def test_the_page_is_what_the_declarations_generate() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is out of date with the settings declarations: run "
        "`python -m paystream.config_doc > docs/configuration.md`")


def test_every_settings_class_of_the_product_is_on_the_page() -> None:
    # Found in the source, not by import: a class in a module nothing imports counts too.
    classes = [node for folder in product_folders()
               for path in (ROOT / folder).rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ClassDef)]
    settings = {"EnvSettings"}
    while grown := {c.name for c in classes if c.name not in settings and any(
            isinstance(base, ast.Name) and base.id in settings for base in c.bases)}:
        settings |= grown
    # Those that declare a variable (a base such as RoleSettings declares none).
    declared = {c.name for c in classes if c.name in settings and any(
        isinstance(k, ast.keyword) and k.arg == "alias" for k in ast.walk(c))}
    listed = {cls.__name__ for cls in SETTINGS}
    assert declared - listed == set(), "add them to paystream/config_doc.py SETTINGS"
    assert listed - declared == set()


def test_each_variable_is_declared_once() -> None:
    names = [field.alias for cls in SETTINGS for field in cls.model_fields.values()
             if field.alias is not None]
    names += [extra.name for cls in SETTINGS for extra in cls.doc_extra]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_a_changed_default_changes_the_page(monkeypatch) -> None:
    from paystream.api.settings import ApiSettings

    field = ApiSettings.model_fields["db_pool_size"]
    monkeypatch.setattr(field, "default", 9)
    assert "| `PAYSTREAM_API_DB_POOL_SIZE` | integer | `9` | ≥ 1 |" in render()
