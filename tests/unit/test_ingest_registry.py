"""The webhook providers, found where they are declared, one module each
(ingest/registry.py): the product's, a test's own beside them, one order whatever the
order they are found in, and each declaration that cannot be served refused with a
message naming the modules."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from paystream.declarations import DeclarationError, Found
from paystream.env import EnvSettings, SettingsError
from paystream.ingest import registry
from paystream.ingest.registry import PRODUCT, Provider, found, in_order
from paystream.ingest.settings import IngestSettings
from tests.support.ingest import ingest_env


def provider(name: str, path: str | None = None) -> Provider[Any]:
    return Provider(name, path or f"/webhooks/{name}", name, {}, EnvSettings,
                    lambda raw, headers, own, ingest: None,
                    lambda obj, own, trace: None)  # type: ignore[arg-type,return-value]


def declared(name: str, path: str | None = None, module: str | None = None
             ) -> Found[Provider[Any]]:
    return Found(module or f"providers.{name}", provider(name, path))


def test_the_product_serves_alchemy_and_the_payment_gateway() -> None:
    product = found(PRODUCT)
    assert {f.declared.name: f.module for f in product} == {
        "alchemy": "paystream.ingest.providers.alchemy",
        "payments": "paystream.ingest.providers.payments"}
    assert [(p.name, p.path) for p in in_order(product)] == [
        ("alchemy", "/webhooks/alchemy"), ("payments", "/webhooks/payments")]
    assert [c.__name__ for c in registry.settings_classes()] == [
        "AlchemySettings", "PaymentsSettings"]


def test_a_provider_declared_in_a_test_alone_is_found_beside_them() -> None:
    everything = found((*PRODUCT, "tests.support.providers"))
    assert "tests.support.providers.second_gateway" in {f.module for f in everything}
    assert [p.name for p in in_order(everything)] == ["alchemy", "gateway_two", "payments"]


def test_the_order_is_by_name_whatever_the_order_found() -> None:
    found_in = [declared("zeta"), declared("alpha"), declared("mid")]
    assert [p.name for p in in_order(found_in)] == ["alpha", "mid", "zeta"]
    assert in_order(list(reversed(found_in))) == in_order(found_in)
    assert in_order([]) == []


@pytest.mark.parametrize(("declarations", "message"), [
    ([declared("a"), declared("a", "/webhooks/other", "elsewhere.a")],
     "webhook providers in providers.a and in elsewhere.a both claim the name 'a'"),
    ([declared("a", "/webhooks/x"), declared("b", "/webhooks/x")],
     "webhook providers in providers.a and in providers.b both claim the path"
     " '/webhooks/x'"),
    ([declared("a", "/healthz")],
     r"'a' \(providers.a\) is served at '/healthz', which is not a path under /webhooks/"),
    ([declared("a", "/webhooks/")], "which is not a path under /webhooks/"),
], ids=["name-twice", "path-twice", "outside-webhooks", "webhooks-itself"])
def test_a_declaration_that_cannot_be_served_refuses_to_start(
        declarations: list[Found[Provider[Any]]], message: str) -> None:
    with pytest.raises(DeclarationError, match=message):
        in_order(declarations)


def test_a_module_of_a_providers_package_that_declares_nothing_refuses_to_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "stray_providers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "stray.py").write_text("PROVIDER = 'payments'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DeclarationError, match=re.escape(
            "stray_providers.stray is named as a module of a package of webhook providers"
            " but declares no PROVIDER = Provider(...) (ingest/registry.py)")):
        found(["stray_providers"])


def test_the_ingest_refuses_to_start_naming_both_modules(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`paystream ingest`'s settings, as it reads them; a SettingsError, which it prints
    and exits 2 on (paystream/cli.py)."""
    package = tmp_path / "twice_providers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "again.py").write_text(
        "from paystream.ingest.providers.payments import PROVIDER as P\n"
        "from dataclasses import replace\n"
        "PROVIDER = replace(P, name='payments_again')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SettingsError, match=re.escape(
            "webhook providers in paystream.ingest.providers.payments and in"
            " twice_providers.again both claim the path '/webhooks/payments'")):
        IngestSettings.from_env(ingest_env(), also=["twice_providers"])
