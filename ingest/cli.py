"""`paystream ingest`: serve the webhooks; `paystream refusals list`: the deliveries it
refused at the door (its records, refusals.py). The operator's commands on users,
addresses and balances are ops/users_cli.py's."""

from __future__ import annotations

import argparse

from paystream.ingest.settings import IngestSettings
from paystream.operator_cli import EXIT_OK, database, format_table


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("ingest", help="serve the webhook ingest API (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="the public (webhook) listener")
    serve.add_argument("--port", type=int, default=8000,
                       help="metrics, readiness and /docs are on the admin port instead "
                            "(PAYSTREAM_INGEST_ADMIN_HOST, PAYSTREAM_INGEST_ADMIN_PORT)")
    serve.add_argument("--workers", type=int, default=1,
                       help="worker processes (each has its own pool and rate limits)")
    serve.set_defaults(func=_serve)

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


def _refusals(args: argparse.Namespace) -> int:
    from paystream.ingest import refusals

    with database("paystream-admin") as conn, conn, conn.cursor() as cur:
        rows = refusals.latest(cur, args.code, args.user, args.limit)
    print(format_table(("last refused", "provider", "code", "user", "event", "attempts"),
                       rows, right_aligned={5}, rule=True))
    return EXIT_OK
