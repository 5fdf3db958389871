"""`paystream reconcile --chain [--network N] [--block B] [--loop --every S]`: the
chain reconciliation (chain_reconcile.py) once, or on a schedule with its result as
metrics on --metrics-port (the alert rules in ops/prometheus/alerts.yml read them)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

import psycopg2
import structlog

from paystream.env import read_one
from paystream.finality import chain_reconcile
from paystream.finality.breaker import CircuitOpenError
from paystream.finality.rpc import RpcError
from paystream.finality.scanner import service as scan_service
from paystream.finality.scanner import settings as scan_settings
from paystream.operator_cli import EXIT_CANNOT_RUN, EXIT_OK, EXIT_PROBLEM, CannotRunError, database
from paystream.process_settings import ProcessSettings

log = structlog.get_logger("paystream.chain_reconcile")


def run(args: argparse.Namespace) -> int:
    if args.user:
        print("paystream reconcile --chain: --user does not apply (the check is per "
              "address)", file=sys.stderr)
        return EXIT_CANNOT_RUN
    try:
        networks = scan_settings.from_env(args.network)
    except ValueError as exc:
        print(f"paystream reconcile --chain: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.loop:
        return _loop(networks, args)
    try:
        reports = [_one(settings, args.block) for settings in networks]
    except (RpcError, CircuitOpenError) as exc:
        print(f"paystream reconcile --chain: the node could not be read: {exc}",
              file=sys.stderr)
        return EXIT_CANNOT_RUN
    text, clean = chain_reconcile.networks_report(reports)
    print(text)
    return EXIT_OK if clean else EXIT_PROBLEM


def _one(settings: scan_settings.ScanSettings, block: int | None
         ) -> chain_reconcile.ChainReport:
    """One network at `block` (default: what the scanner reads up to). CannotRunError
    when Postgres does not answer; RpcError when the node does not."""
    scanner = scan_service.scanner_for(settings)
    at = scanner.target() if block is None else block
    with database("paystream-reconcile", autocommit=True) as conn, conn.cursor() as cur:
        return chain_reconcile.reconcile(cur, scanner.rpc, at)


def _loop(networks: list[scan_settings.ScanSettings], args: argparse.Namespace) -> int:
    """Every --every seconds until SIGTERM/SIGINT; a failed run is counted, logged and
    tried again at the next one (the last result's metrics stay, and so does its time)."""
    from prometheus_client import start_http_server

    from paystream.logs import configure_logging

    configure_logging("chain-reconcile")
    if args.metrics_port:
        start_http_server(args.metrics_port,
                          addr=args.bind or read_one(ProcessSettings, "metrics_host"))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.is_set():
        for settings in networks:
            try:
                report = _one(settings, args.block)
            except (RpcError, CircuitOpenError, CannotRunError, psycopg2.Error) as exc:
                chain_reconcile.FAILED.labels(settings.network).inc()
                log.warning("chain_reconcile_failed", network=settings.network,
                            error=str(exc).strip()[:300])
                continue
            chain_reconcile.record(report, time.time())
            log.info("chain_reconciled", network=report.network, block=report.block,
                     addresses=report.addresses, shortfalls=report.count("shortfall"),
                     surpluses=report.count("surplus"),
                     problems=[f"{h.address} {h.asset} {h.problem}" for h in report.problems])
        stop.wait(args.every)
    return EXIT_OK
