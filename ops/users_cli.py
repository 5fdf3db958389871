"""`paystream users add`, `addresses add [--pool]`, `balances`: the operator's commands on
the tables the ingest reads (the actions are ops/users.py's)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from paystream.operator_cli import (
    EXIT_CANNOT_RUN,
    EXIT_OK,
    EXIT_PROBLEM,
    database,
    iso_moment,
)

if TYPE_CHECKING:
    from paystream.schema.db import Connection


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    users = sub.add_parser("users", help="manage users")
    users_sub = users.add_subparsers(dest="users_command", required=True)
    add_user = users_sub.add_parser("add", help="create a user")
    add_user.add_argument("user_id")
    add_user.add_argument("--merchant", default=None, metavar="MERCHANT_ID",
                          help="the merchant the user belongs to (paystream merchants list;"
                               " default: the default merchant, m_default)")
    add_user.set_defaults(func=_add_user)

    addresses = sub.add_parser("addresses", help="manage deposit addresses")
    addresses_sub = addresses.add_subparsers(dest="addresses_command", required=True)
    add_address = addresses_sub.add_parser(
        "add", help="assign a deposit address to a user, or load addresses into the pool "
                    "chain invoices take from (--pool NETWORK ADDRESS...)",
        usage="%(prog)s --network NETWORK --address ADDRESS --user USER [--scan-from BLOCK]"
              "\n       %(prog)s --pool NETWORK ADDRESS [ADDRESS ...]")
    add_address.add_argument("--network", help="e.g. ETH_MAINNET")
    add_address.add_argument("--address")
    add_address.add_argument("--user")
    add_address.add_argument("--pool", metavar="NETWORK",
                             help="load the ADDRESSes into the deposit-address pool of "
                                  "NETWORK: a chain invoice of a user without a spare "
                                  "address takes one, and it becomes that user's")
    add_address.add_argument("pooled", nargs="*", metavar="ADDRESS",
                             help="with --pool: the addresses to load")
    add_address.add_argument("--scan-from", type=int, metavar="BLOCK",
                             help="also have the chain scanner read this address's deposits "
                                  "from BLOCK up to where it is (for an address paid before "
                                  "it was registered; idempotent)")
    add_address.set_defaults(func=_add_address)

    balances = sub.add_parser(
        "balances", help="show balances (user, asset, available, pending, held)")
    balances.add_argument("--user", default=None)
    balances.add_argument("--at", type=iso_moment, default=None, metavar="TIMESTAMP",
                          help="the balances at this moment, from the postings (ISO 8601,"
                               " e.g. 2026-12-02T10:00:00Z; UTC when no offset is given);"
                               " needs --user")
    balances.set_defaults(func=_balances)



def _add_user(args: argparse.Namespace) -> int:
    from paystream.ops import users
    from paystream.schema.merchants import DEFAULT_MERCHANT

    merchant = args.merchant or DEFAULT_MERCHANT
    return _run(lambda conn: f"user {args.user_id} of {merchant}: " + (
        "created" if users.add_user(conn, args.user_id, merchant) else "already exists"))


def _add_address(args: argparse.Namespace) -> int:
    from paystream.ops import users

    if args.pool is not None:
        return _add_to_pool(args)
    missing = [flag for flag, value in (("--network", args.network),
                                        ("--address", args.address), ("--user", args.user))
               if value is None]
    if missing or args.pooled:
        print("error: addresses add needs --network, --address and --user (missing: "
              f"{', '.join(missing) or 'none'}), or --pool NETWORK ADDRESS...; extra "
              f"arguments: {' '.join(args.pooled) or 'none'}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    scan = "" if args.scan_from is None else f"; scan from block {args.scan_from} requested"
    return _run(lambda conn: f"{args.network.upper()} {args.address.lower()} -> "
                f"{args.user}: " + ("added" if users.add_address(
                    conn, args.network, args.address, args.user, args.scan_from)
                    else "already assigned") + scan)


def _add_to_pool(args: argparse.Namespace) -> int:
    """Each address added or refused with its reason; exit 1 if any was refused."""
    from paystream.ops import users

    if not args.pooled or any(v is not None for v in (args.network, args.address, args.user,
                                                       args.scan_from)):
        print("error: addresses add --pool NETWORK takes the addresses as arguments, "
              "without --network, --address, --user or --scan-from", file=sys.stderr)
        return EXIT_CANNOT_RUN
    network = args.pool.upper()
    refused = 0

    def load(conn: Connection) -> str:
        nonlocal refused
        done = users.add_to_pool(conn, args.pool, args.pooled)
        refused = sum(why is not None for _, why in done)
        lines = [f"{network} {address}: " + ("added to the pool" if why is None
                                              else f"refused: {why}")
                 for address, why in done]
        lines.append(f"{len(done) - refused} added, {refused} refused")
        return "\n".join(lines)

    code = _run(load)
    return EXIT_PROBLEM if code == EXIT_OK and refused else code


def _balances(args: argparse.Namespace) -> int:
    from paystream.ops import users

    return _run(lambda conn: users.render_table(users.balances(conn, args.user, args.at)))


def _run(action: Callable[[Connection], str]) -> int:
    """Run one operator action and print its answer; a refused request exits 1."""
    from paystream.ops.users import AdminError

    with database("paystream-admin") as conn:
        try:
            print(action(conn))
        except AdminError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_PROBLEM
    return EXIT_OK
