"""The `paystream` command. Each package registers its own subcommands.

Subcommand modules are imported lazily so that `paystream stack up` works before the
service dependencies (FastAPI, confluent-kafka, ...) are importable, and so a failure in
one area does not break the others.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING

from paystream.env import SettingsError
from paystream.operator_cli import EXIT_CANNOT_RUN, CannotRunError

if TYPE_CHECKING:
    from paystream.notify.ledger_consequence import ResolvedShortfall
    from paystream.schema.db import Cursor

# (module, function) pairs; each function takes the subparsers object and adds commands
# whose parsers set `func` (a callable taking the parsed args and returning an exit code).
COMMAND_MODULES = (
    "paystream.stack.cli",
    "paystream.stack.db_cli",

    "paystream.stack.alerts_cli",
    "paystream.ingest.cli",
    "paystream.ops.users_cli",
    "paystream.api.cli",
    "paystream.consume",
    "paystream.ops.cli",
    "paystream.consumers.ledger.cli",
    "paystream.consumers.dead_letters.cli",
    "paystream.invoices.cli",
    "paystream.notify.cli",
    "paystream.run",
    "paystream.chaos.cli",
    "paystream.finality.scanner.cli",
    "paystream.console.cli",
    "paystream.statements.cli",
)


# What a feature's commands are handed of other features, as the ledger consumer is
# handed its consequences (paystream/consume.py), so the ledger imports none: resolving a
# shortfall (consumers/ledger/cli.py) tells its user through notify/. The console's app
# hands its ledger pages the same (console/app.py).
def _tell_shortfall_resolved(cur: Cursor, resolved: ResolvedShortfall,
                             still_flagged: bool) -> None:
    from paystream.notify.ledger_consequence import tell_shortfall_resolved

    tell_shortfall_resolved(cur, resolved, still_flagged)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="paystream",
        description="Payment-event pipeline: webhooks -> outbox -> Debezium -> Kafka -> ledger",
    )
    parser.set_defaults(tell_shortfall_resolved=_tell_shortfall_resolved)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that area has no commands yet
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CannotRunError, SettingsError) as exc:
        # One place for "could not run": the database unreachable, a bad setting.
        print(f"paystream {args.command}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
