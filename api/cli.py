"""`paystream api` (serve the merchant API), `paystream merchants add / list` (the
tenants) and `paystream apikeys create / list / revoke` (a merchant's keys, or an
operator's; the key is printed once and never stored)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta

from paystream.operator_cli import EXIT_OK, EXIT_PROBLEM, format_table, transaction


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("api", help="serve the merchant API (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1")
    # Default: PAYSTREAM_API_PORT (ApiSettings.port), read when the command runs.
    serve.add_argument("--port", type=int, default=None,
                       help="/docs, /metrics and /readyz are on the admin port instead "
                            "(PAYSTREAM_API_ADMIN_HOST, PAYSTREAM_API_ADMIN_PORT)")
    serve.add_argument("--workers", type=int, default=1,
                       help="worker processes (each has its own pool and rate limits)")
    serve.set_defaults(func=_serve)

    keys = sub.add_parser("apikeys", help="manage the merchant API's keys")
    keys_sub = keys.add_subparsers(dest="apikeys_command", required=True)
    create = keys_sub.add_parser("create", help="make a key (printed once)")
    create.add_argument("--name", required=True)
    create.add_argument("--scopes", default="read", help=(
        "comma-separated: read, write (every resource's), or per resource, e.g. "
        "balances:read,withdrawals:write (docs/api.md#keys-and-scopes)"))
    owner = create.add_mutually_exclusive_group()
    owner.add_argument("--merchant", metavar="MERCHANT_ID",
                       help="the merchant whose resources the key sees (default: m_default)")
    owner.add_argument("--operator", action="store_true",
                       help="a key that sees every merchant (for the operator's own tools)")
    create.add_argument("--expires-in", type=duration, metavar="DURATION",
                        help="the key stops working after this long: 90d, 12h, 30m")
    create.set_defaults(func=_create)
    listed = keys_sub.add_parser("list", help="every key (never the key itself)")
    listed.add_argument("--merchant", metavar="MERCHANT_ID", help="only this merchant's")
    listed.set_defaults(func=_list)
    revoke = keys_sub.add_parser("revoke", help="revoke a key now")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=_revoke)

    merchants = sub.add_parser("merchants", help="manage merchants (tenants)")
    merchants_sub = merchants.add_subparsers(dest="merchants_command", required=True)
    add = merchants_sub.add_parser("add", help="make a merchant (prints its id)")
    add.add_argument("name")
    add.set_defaults(func=_add_merchant)
    merchants_sub.add_parser("list", help="every merchant").set_defaults(
        func=_list_merchants)


def duration(text: str) -> timedelta:
    """An argparse type: `90d`, `12h`, `30m` or `45s`."""
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    number, unit = text[:-1], text[-1:]
    if unit not in units or not number.isdigit() or int(number) == 0 or len(number) > 6:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (a positive number and d, h, m or s: 90d)")
    return timedelta(**{units[unit]: int(number)})


def _serve(args: argparse.Namespace) -> int:
    from paystream.api.app import FACTORY
    from paystream.api.settings import ApiSettings
    from paystream.edge.serve import serve, uvicorn_config
    from paystream.env import variable_name

    settings = ApiSettings.from_env(
        overrides=None if args.port is None else {"port": args.port})
    serve(uvicorn_config(FACTORY, args.host, settings.port, args.workers,
                         trusted_proxies=settings.trusted_proxies),
          admin_host=settings.admin_host, admin_port=settings.admin_port,
          admin_port_variable=variable_name(ApiSettings, "admin_port"))
    return EXIT_OK


def _create(args: argparse.Namespace) -> int:
    from paystream.api import keys
    from paystream.schema.merchants import DEFAULT_MERCHANT

    merchant = None if args.operator else (args.merchant or DEFAULT_MERCHANT)
    expires = None if args.expires_in is None else datetime.now(UTC) + args.expires_in
    try:
        scopes = keys.parse_scopes(args.scopes)
        with transaction("paystream-apikeys") as cur:
            made, key = keys.create(cur, args.name, scopes, merchant, expires)
    except keys.ApiKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    print(f"key id    {made.key_id}\nname      {made.name}\n"
          f"scopes    {','.join(sorted(made.scopes))}\n"
          f"key       {key}\n(shown once: only its hash is stored)\n"
          f"merchant  {made.merchant_id or 'every merchant (an operator key)'}\n"
          f"expires   {_moment(made.expires_at)}")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from paystream.api import keys

    with transaction("paystream-apikeys") as cur:
        rows = keys.listed(cur, args.merchant)
    print(format_table(
        ("key id", "merchant", "name", "scopes", "created", "expires", "last used",
         "revoked"),
        [(k.key_id, k.merchant_id or "(operator)", k.name, ",".join(sorted(k.scopes)),
          _moment(k.created_at), _moment(k.expires_at), _moment(k.last_used_at),
          _moment(k.revoked_at)) for k in rows], rule=True))
    return EXIT_OK


def _moment(at: datetime | None) -> str:
    return "-" if at is None else at.isoformat(timespec="seconds")


def _add_merchant(args: argparse.Namespace) -> int:
    from paystream.schema import merchants

    try:
        with transaction("paystream-merchants") as cur:
            made = merchants.add(cur, args.name)
    except merchants.MerchantError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    print(made.merchant_id)
    return EXIT_OK


def _list_merchants(args: argparse.Namespace) -> int:
    from paystream.schema import merchants

    with transaction("paystream-merchants") as cur:
        rows = merchants.listed(cur)
    print(format_table(("merchant id", "name", "users", "created"), [
        (m.merchant_id, m.name, str(m.users), _moment(m.created_at)) for m in rows],
        rule=True))
    return EXIT_OK


def _revoke(args: argparse.Namespace) -> int:
    from paystream.api import keys

    try:
        with transaction("paystream-apikeys") as cur:
            done = keys.revoke(cur, args.key_id)
    except keys.ApiKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    print(f"{args.key_id}: " + ("revoked" if done else "was revoked already"))
    return EXIT_OK
