"""docs/configuration.md, generated from the settings declarations (paystream/env.py):
every variable's name, type, default, bounds and meaning, grouped by component.

    python -m paystream.config_doc > docs/configuration.md

tests/unit/test_config_doc.py fails when the page differs from what this prints, so a
variable cannot be added, renamed or re-defaulted without the page following.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import annotated_types
from pydantic.fields import FieldInfo

from paystream.api.settings import ApiSettings
from paystream.backups import BackupSettings
from paystream.connectors.endpoint import ConnectSettings
from paystream.console_kit.settings import ConsoleSettings
from paystream.consumers.crash_hooks import CrashHookSettings
from paystream.consumers.ledger.settings import LedgerSettings
from paystream.credentials import StateSettings
from paystream.env import EnvSettings, default_text
from paystream.finality.scanner.settings import ScannerSettings
from paystream.finality.settings import FinalitySettings
from paystream.ingest import registry
from paystream.ingest.settings import IngestSettings
from paystream.kafka_nodes import KafkaSettings
from paystream.kafka_security import KafkaSecuritySettings
from paystream.local_chain import AnvilSettings
from paystream.notify.crash_hooks import SenderCrashHookSettings
from paystream.notify.seal import SealSettings
from paystream.notify.settings import NotifySettings, ReminderSettings
from paystream.ops.health_settings import HealthSettings
from paystream.process_settings import ProcessSettings
from paystream.run import RunSettings
from paystream.schema.db import DatabaseRoleSettings, DatabaseSettings
from paystream.schema.migrate import MigrateSettings
from paystream.stack.alertmanager import AlertmanagerConfig
from paystream.stack.pgbouncer import PgBouncerConfig
from paystream.stack.postgres import SuperuserSettings
from paystream.stack.prometheus import PrometheusConfig
from paystream.stack.settings import StackSettings
from paystream.stack.standby import StandbySettings
from paystream.stack.targets import MetricsPortSettings
from paystream.statements.settings import StatementSettings

# The page's order: where the services are first, then the local stack, then each
# component. Consecutive classes of one doc_section share its heading.
SETTINGS: tuple[type[EnvSettings], ...] = (
    DatabaseSettings,
    KafkaSettings,
    KafkaSecuritySettings,
    ConnectSettings,
    DatabaseRoleSettings,
    MigrateSettings,
    SuperuserSettings,
    StateSettings,
    StackSettings,
    AnvilSettings,
    PrometheusConfig,
    MetricsPortSettings,
    AlertmanagerConfig,
    PgBouncerConfig,
    BackupSettings,
    StandbySettings,
    IngestSettings,
    *registry.settings_classes(),  # each provider's, found as the ingest finds them
    RunSettings,
    ApiSettings,
    ConsoleSettings,
    StatementSettings,
    LedgerSettings,
    FinalitySettings,
    ScannerSettings,
    HealthSettings,
    NotifySettings,
    ReminderSettings,
    SealSettings,
    ProcessSettings,
    CrashHookSettings,
    SenderCrashHookSettings,
)

INTRO = """\
# Configuration

Every setting is an environment variable with a safe local default, so `make run` needs
none of them. Unset or empty means the default; a value that does not parse or is out of
bounds stops the command at start with exit code 2 and a message naming the variable and
the value. Command-line flags are in `paystream <command> --help`; a flag overrides its
variable.

This page is generated from the settings declarations (each component's `*Settings`
class) by `python -m paystream.config_doc > docs/configuration.md`;
`tests/unit/test_config_doc.py` fails when it is out of date. A name ending in
`<NETWORK>` is one variable per provider network name, for example
`ETH_RPC_URL_ETH_MAINNET`.
"""

TABLE_HEAD = ("| variable | type | default | bounds | meaning |\n"
              "|---|---|---|---|---|\n")


def render() -> str:
    """The whole page."""
    parts = [INTRO]
    section = None
    for cls in SETTINGS:
        if cls.doc_section != section:
            section = cls.doc_section
            parts.append(f"\n## {section}\n")
        doc = inspect.cleandoc(cls.__doc__ or "")
        parts.append(f"\n{doc}\n\n" if doc else "\n")
        parts.append(TABLE_HEAD + "".join(f"| {' | '.join(row)} |\n" for row in rows(cls)))
    return "".join(parts)


def rows(cls: type[EnvSettings]) -> Iterator[tuple[str, str, str, str, str]]:
    for name, field in cls.model_fields.items():
        if field.alias is None:
            continue  # built from other variables, not read itself
        marks = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        text = default_text(cls, name)
        default = str(marks.get("shown") or (f"`{text}`" if text is not None else "unset"))
        kind = str(marks.get("type") or _type(field.annotation))
        yield (f"`{field.alias}`", kind, default, _bounds(field),
               field.description or "")
    for extra in cls.doc_extra:
        yield f"`{extra.name}`", extra.type, extra.default, "", extra.doc


def _type(annotation: Any) -> str:
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is tuple:
        item = get_args(annotation)[0]
        return {str: "list", float: "list of seconds", bytes: "list of secrets"}[item]
    return {int: "integer", float: "number", str: "text", bool: "`1` or `0`",
            Path: "path", Decimal: "decimal"}[annotation]


def _bounds(field: FieldInfo) -> str:
    marks = []
    for rule in field.metadata:
        if isinstance(rule, annotated_types.Ge):
            marks.append(f"≥ {_number(rule.ge)}")
        elif isinstance(rule, annotated_types.Gt):
            marks.append(f"> {_number(rule.gt)}")
        elif isinstance(rule, annotated_types.Le):
            marks.append(f"≤ {_number(rule.le)}")
        elif isinstance(rule, annotated_types.Lt):
            marks.append(f"< {_number(rule.lt)}")
    return ", ".join(marks)


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


if __name__ == "__main__":
    print(render(), end="")
