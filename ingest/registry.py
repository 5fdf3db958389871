"""The webhook providers: what one declares, how the ingest finds them, and what it
serves once their settings are read.

A provider is one module of the package ingest/providers/ that declares, as a
module-level

    PROVIDER = Provider("payments", "/webhooks/payments", "Payment gateway", OPENAPI,
                        PaymentsSettings, verify, delivery)

its name (the `provider` label of metrics and logs), its path, its /docs summary and
OpenAPI (its headers and body), its own settings class (its variables, read once at
start-up; a missing or weak secret refuses to start), its signature check on the raw
bytes and its delivery (the verified JSON to the DeliveryWrite the group commit runs,
ingest/recording.py). `IngestSettings.from_env` finds every module of that package and
of the packages `also` names (a test's own), as paystream/declarations.py finds
declarations, orders them by name (`in_order`: /docs, and every process, list one
order) and reads each one's settings (`served`). Nothing else names a provider: the
routes, the app's dispatch and metrics, and /docs read what was served.

Two providers that claim one name or one path, a path outside /webhooks/, or a module
of the package that declares nothing refuse to start (DeclarationError, exit 2).
docs/ingest.md#adding-a-provider walks through a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from paystream import declarations
from paystream.declarations import DeclarationError, Found
from paystream.env import EnvSettings
from paystream.ingest.recording import DeliveryWrite
from paystream.trace import Trace

if TYPE_CHECKING:
    from paystream.ingest.settings import IngestSettings

ATTRIBUTE = "PROVIDER"
PRODUCT = ("paystream.ingest.providers",)  # where `paystream ingest` looks
WEBHOOKS = "/webhooks/"  # every provider's path is under it; the app serves nothing else

S = TypeVar("S", bound=EnvSettings)

# The signature check: raw body, headers (lower-case names), the provider's settings and
# the ingest's; raises SignatureError (401).
Verify = Callable[[bytes, Mapping[str, str], S, "IngestSettings"], object]
# The verified body, parsed as JSON but not yet validated, to its write; raises
# PayloadError (400) naming the broken field.
Delivery = Callable[[Any, S, Trace], DeliveryWrite]


@dataclass(frozen=True)
class Provider(Generic[S]):
    name: str        # the `provider` label of metrics and logs
    path: str        # POST here
    summary: str     # /docs
    openapi: dict[str, Any]  # its headers and body (ingest/api_schema.py: the answers)
    settings: type[S]  # its variables, read once at start-up
    verify: Verify[S]
    delivery: Delivery[S]


@dataclass(frozen=True, slots=True)
class Served:
    """A provider as an ingest process serves it: with its settings, read at start-up.
    A request reads its fields and calls its functions; nothing is looked up."""

    provider: Provider[Any]
    settings: EnvSettings
    name: str
    verify: Verify[Any]
    delivery: Delivery[Any]


def served(env: Mapping[str, str] | None = None, also: Sequence[str] = ()
           ) -> tuple[Served, ...]:
    """Every provider under the product's package and the packages `also` names, in
    order, each with its settings read from `env` (default: os.environ). A SettingsError
    (exit 2) for a provider's setting it refuses, or for declarations that cannot be
    served together."""
    return tuple(Served(p, p.settings.from_env(env), p.name, p.verify, p.delivery)
                 for p in in_order(found((*PRODUCT, *also))))


def settings_classes() -> list[type[EnvSettings]]:
    """The product's providers' settings classes, in order (docs/configuration.md)."""
    return [p.settings for p in in_order(found(PRODUCT))]


def found(roots: Sequence[str]) -> list[Found[Provider[Any]]]:
    """The declaration of every module of the packages `roots` (not of their
    subpackages)."""
    return declarations.found(
        roots, chosen=lambda name: name.rpartition(".")[0] in roots, attribute=ATTRIBUTE,
        kind=Provider, chosen_as="a module of a package of webhook providers",
        see="ingest/registry.py")


def in_order(providers: Sequence[Found[Provider[Any]]]) -> list[Provider[Any]]:
    """The providers by name; DeclarationError for two with one name or one path, or a
    path outside /webhooks/."""
    names: dict[str, str] = {}
    paths: dict[str, str] = {}
    for f in providers:
        name, path = f.declared.name, f.declared.path
        if not path.startswith(WEBHOOKS) or len(path) == len(WEBHOOKS):
            raise DeclarationError(f"webhook provider {name!r} ({f.module}) is served at"
                                   f" {path!r}, which is not a path under {WEBHOOKS}")
        for claimed, what, key in ((names, "name", name), (paths, "path", path)):
            if key in claimed:
                raise DeclarationError(f"webhook providers in {claimed[key]} and in"
                                       f" {f.module} both claim the {what} {key!r}")
            claimed[key] = f.module
    return sorted((f.declared for f in providers), key=lambda p: p.name)
