"""`paystream migrate`: apply the pending schema migrations."""

from __future__ import annotations

import argparse

from paystream.schema.db import database_url
from paystream.schema.migrate import apply_migrations


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("migrate", help="apply pending SQL migrations")
    p.set_defaults(func=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    applied = apply_migrations(database_url())
    print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    return 0
