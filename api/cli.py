"""`paystream api` (serve the merchant API) and `paystream apikeys create / list /
revoke` (the operator's keys; the key is printed once and never stored)."""

from __future__ import annotations

import argparse
import sys

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
    create.add_argument("--scopes", default="read", help="read, write or read,write")
    create.set_defaults(func=_create)
    listed = keys_sub.add_parser("list", help="every key (never the key itself)")
    listed.set_defaults(func=_list)
    revoke = keys_sub.add_parser("revoke", help="revoke a key now")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=_revoke)


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

    try:
        scopes = keys.parse_scopes(args.scopes)
        with transaction("paystream-apikeys") as cur:
            made, key = keys.create(cur, args.name, scopes)
    except keys.ApiKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    print(f"key id  {made.key_id}\nname    {made.name}\n"
          f"scopes  {','.join(sorted(made.scopes))}\n"
          f"key     {key}\n(shown once: only its hash is stored)")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from paystream.api import keys

    with transaction("paystream-apikeys") as cur:
        rows = keys.listed(cur)
    print(format_table(("key id", "name", "scopes", "created", "revoked"), [
        (k.key_id, k.name, ",".join(sorted(k.scopes)), k.created_at.isoformat(timespec="seconds"),
         k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else "-") for k in rows],
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
