"""`paystream ingest` (serve the webhooks) and the operator commands around it:
`paystream users add`, `paystream addresses add`, `paystream balances`,
`paystream refusals list`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from paystream.ingest.settings import IngestSettings
from paystream.operator_cli import EXIT_OK, EXIT_PROBLEM, database, iso_moment

if TYPE_CHECKING:
    from paystream.schema.db import Connection


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("ingest", help="serve the webhook ingest API (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="the public (webhook) listener")
    serve.add_argument("--port", type=int, default=8000,
                       help="metrics, readiness and /docs are on the admin port instead "
                            "(PAYSTREAM_INGEST_ADMIN_HOST, PAYSTREAM_INGEST_ADMIN_PORT)")
    serve.add_argument("--workers", type=int, default=1,
                       help="worker processes (each has its own pool and rate limits)")
    serve.set_defaults(func=_serve)

    users = sub.add_parser("users", help="manage users")
    users_sub = users.add_subparsers(dest="users_command", required=True)
    add_user = users_sub.add_parser("add", help="create a user")
    add_user.add_argument("user_id")
    add_user.set_defaults(func=_add_user)

    addresses = sub.add_parser("addresses", help="manage deposit addresses")
    addresses_sub = addresses.add_subparsers(dest="addresses_command", required=True)
    add_address = addresses_sub.add_parser("add", help="assign a deposit address to a user")
    add_address.add_argument("--network", required=True, help="e.g. ETH_MAINNET")
    add_address.add_argument("--address", required=True)
    add_address.add_argument("--user", required=True)
    add_address.set_defaults(func=_add_address)

    balances = sub.add_parser(
        "balances", help="show balances (user, asset, available, pending, held)")
    balances.add_argument("--user", default=None)
    balances.add_argument("--at", type=iso_moment, default=None, metavar="TIMESTAMP",
                          help="the balances at this moment, from the postings (ISO 8601,"
                               " e.g. 2026-12-02T10:00:00Z; UTC when no offset is given);"
                               " needs --user")
    balances.set_defaults(func=_balances)

    refused = sub.add_parser(
        "refusals", help="gateway events refused at the door (422), newest first")
    refused_sub = refused.add_subparsers(dest="refusals_command", required=True)
    listing = refused_sub.add_parser("list", help="the latest refused deliveries")
    listing.add_argument("--code", choices=("unknown_user", "reference_of_other_user"))
    listing.add_argument("--user", default=None)
    listing.add_argument("--limit", type=int, default=50)
    listing.set_defaults(func=_refusals)


def _serve(args: argparse.Namespace) -> int:
    from paystream.ingest.serve import serve

    # Fail here, with the reason (a SettingsError: exit 2), not in every worker.
    serve(IngestSettings.from_env(), args.host, args.port, args.workers)
    return 0


def _add_user(args: argparse.Namespace) -> int:
    from paystream.ingest import admin

    return _admin(lambda conn: f"user {args.user_id}: " + (
        "created" if admin.add_user(conn, args.user_id) else "already exists"))


def _add_address(args: argparse.Namespace) -> int:
    from paystream.ingest import admin

    return _admin(lambda conn: f"{args.network.upper()} {args.address.lower()} -> "
                  f"{args.user}: " + ("added" if admin.add_address(
                      conn, args.network, args.address, args.user) else "already assigned"))


def _balances(args: argparse.Namespace) -> int:
    from paystream.ingest import admin

    return _admin(lambda conn: admin.render_table(admin.balances(conn, args.user, args.at)))


def _refusals(args: argparse.Namespace) -> int:
    from paystream.ingest import admin

    return _admin(lambda conn: admin.render_refusals(
        admin.refusals(conn, args.code, args.user, args.limit)))


def _admin(action: Callable[[Connection], str]) -> int:
    """Run one admin action and print its answer; a refused request exits 1."""
    from paystream.ingest.admin import AdminError

    with database("paystream-admin") as conn:
        try:
            print(action(conn))
        except AdminError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_PROBLEM
    return EXIT_OK
