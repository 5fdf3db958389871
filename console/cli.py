"""`paystream console` (serve the operator console) and `paystream console keys create /
list / revoke` (who may log in; a key is printed once and never stored)."""

from __future__ import annotations

import argparse
import sys

from paystream.operator_cli import EXIT_OK, EXIT_PROBLEM, format_table, transaction


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    console = sub.add_parser("console", help="serve the operator console (HTML, loopback)")
    # Defaults: PAYSTREAM_CONSOLE_HOST / _PORT (ConsoleSettings), read when it runs.
    console.add_argument("--host", default=None, help="the listener's address (default "
                         "PAYSTREAM_CONSOLE_HOST, loopback)")
    console.add_argument("--port", type=int, default=None,
                         help="the listener's port (default PAYSTREAM_CONSOLE_PORT, 8102)")
    console.set_defaults(func=_serve)
    csub = console.add_subparsers(dest="console_command", metavar="ACTION")
    keys = csub.add_parser("keys", help="who may log in to the console")
    ksub = keys.add_subparsers(dest="console_keys_command", required=True, metavar="ACTION")
    create = ksub.add_parser("create", help="make a console key (printed once)")
    create.add_argument("--name", required=True, help="whose it is, for the audit")
    create.set_defaults(func=_create)
    ksub.add_parser("list", help="every console key (never the key itself)").set_defaults(
        func=_list)
    revoke = ksub.add_parser("revoke", help="revoke a key now (its sessions end)")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=_revoke)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from paystream.console.app import FACTORY
    from paystream.console_kit.settings import ConsoleSettings
    from paystream.edge.serve import uvicorn_config

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = ConsoleSettings.from_env(overrides=overrides)
    uvicorn.Server(uvicorn_config(FACTORY, settings.host, settings.port, 1,
                                  trusted_proxies=settings.trusted_proxies)).run()
    return EXIT_OK


def _create(args: argparse.Namespace) -> int:
    from paystream.console_kit import access

    try:
        with transaction("paystream-console-keys") as cur:
            made, key = access.create_key(cur, args.name)
    except access.AccessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    print(f"key id  {made.key_id}\nname    {made.name}\nkey     {key}\n"
          "(shown once: only its hash is stored)")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from paystream.console_kit import access

    with transaction("paystream-console-keys") as cur:
        rows = access.list_keys(cur)
    print(format_table(("key id", "name", "created", "revoked"), [
        (k.key_id, k.name, k.created_at.isoformat(timespec="seconds"),
         k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else "-") for k in rows],
        rule=True))
    return EXIT_OK


def _revoke(args: argparse.Namespace) -> int:
    from paystream.console_kit import access

    try:
        with transaction("paystream-console-keys") as cur:
            done = access.revoke_key(cur, args.key_id)
    except access.AccessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    print(f"{args.key_id}: " + ("revoked (its sessions ended)" if done
                                else "was revoked already"))
    return EXIT_OK
