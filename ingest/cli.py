"""`paystream ingest`: serve the webhooks (the operator's commands on users, addresses,
balances and refusals are ops/users_cli.py's)."""

from __future__ import annotations

import argparse

from paystream.ingest.settings import IngestSettings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("ingest", help="serve the webhook ingest API (uvicorn)")
    serve.add_argument("--host", default="127.0.0.1", help="the public (webhook) listener")
    serve.add_argument("--port", type=int, default=8000,
                       help="metrics, readiness and /docs are on the admin port instead "
                            "(PAYSTREAM_INGEST_ADMIN_HOST, PAYSTREAM_INGEST_ADMIN_PORT)")
    serve.add_argument("--workers", type=int, default=1,
                       help="worker processes (each has its own pool and rate limits)")
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from paystream.ingest.serve import serve

    # Fail here, with the reason (a SettingsError: exit 2), not in every worker.
    serve(IngestSettings.from_env(), args.host, args.port, args.workers)
    return 0
