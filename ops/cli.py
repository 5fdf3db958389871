"""`paystream migrate | reconcile | health | housekeeping`: the operator's checks that
span the parts (the features' own commands are in their folders: the ledger's books in
consumers/ledger/cli.py, the dead letters in consumers/dead_letters/cli.py, ...).

`reconcile` is the ledger's self-check with every feature's own check
(paystream/reconcile_checks.py), or with --chain the chain deposits' custody against the
chain (finality/chain_reconcile.py): it composes features, so it lives here, above them.

Exit codes (paystream/operator_cli.py): 0 clean / healthy / done; 1 a mismatch, an
unhealthy check; 2 the command could not run (bad arguments, the database unreachable).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from paystream.env import default_text, read_one, variable_name
from paystream.operator_cli import (
    EXIT_CANNOT_RUN,
    EXIT_OK,
    EXIT_PROBLEM,
    database,
)
from paystream.ops.health_settings import HealthSettings
from paystream.process_settings import ProcessSettings

if TYPE_CHECKING:  # imported on use: `paystream --help` must not need the Kafka client
    from paystream.ops.health import HealthChecker


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("migrate", help="apply pending SQL migrations") \
        .set_defaults(func=_migrate)
    for add in (_add_reconcile, _add_health, _add_housekeeping):
        add(sub)


def _add_reconcile(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rec = sub.add_parser("reconcile",
                         help="check every balance against its journal in one snapshot")
    rec.add_argument("--user", action="append", metavar="USER_ID",
                     help="only this user's balances (repeatable)")
    rec.add_argument("--chain", action="store_true",
                     help="instead: each deposit address's on-chain balance against the "
                          "custody the books posted for it (exit 1 on a shortfall or a "
                          "surplus, naming the addresses)")
    rec.add_argument("--network", action="append", metavar="NETWORK",
                     help="with --chain: only this network (repeatable; default the "
                          "finality watcher's networks)")
    rec.add_argument("--block", type=int, metavar="BLOCK",
                     help="with --chain: at this block (default: the finalized block, or "
                          "head - credit depth)")
    rec.add_argument("--loop", action="store_true",
                     help="with --chain: run every --every seconds until SIGTERM, the result "
                          "as metrics on --metrics-port")
    rec.add_argument("--every", type=float, default=3600.0, metavar="SECONDS",
                     help="with --loop: seconds between runs (default 3600)")
    rec.add_argument("--metrics-port", type=int, default=9407, metavar="PORT",
                     help="with --loop: Prometheus port (0 disables; default 9407)")
    rec.add_argument("--bind", default=None,
                     help="with --loop: address for --metrics-port (loopback unless told "
                          "otherwise)")
    rec.set_defaults(func=_reconcile)


def _add_health(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    health = sub.add_parser("health", help="stuck events, slot WAL, lag, DLQ, connector")
    health.add_argument("--check", action="append", metavar="NAME",
                        help="run only these checks (repeatable): " + _check_names())
    health.add_argument("--stuck-after", type=float, metavar="SECONDS",
                        help="an event still `received` after this is stuck "
                             f"(default {_default('stuck_after_s')}, env "
                             f"{variable_name(HealthSettings, 'stuck_after_s')})")
    health.add_argument("--wal-warn-mb", type=float,
                        help=f"slot WAL warn threshold (default {_default('wal_warn_mb')} MiB)")
    health.add_argument("--wal-unhealthy-mb", type=float,
                        help="slot WAL unhealthy threshold "
                             f"(default {_default('wal_unhealthy_mb')} MiB)")
    health.add_argument("--lag-warn", type=float,
                        help=f"consumer lag warn (default {_default('lag_warn')})")
    health.add_argument("--lag-unhealthy", type=float,
                        help=f"consumer lag unhealthy (default {_default('lag_unhealthy')})")
    health.add_argument("--dlq-warn", type=float,
                        help="dead letters in the last hour: warn "
                             f"(default {_default('dead_letters_warn')})")
    health.add_argument("--dlq-unhealthy", type=float,
                        help="dead letters in the last hour: unhealthy "
                             f"(default {_default('dead_letters_unhealthy')})")
    health.add_argument("--group", action="append", metavar="GROUP=TOPIC",
                        help="consumer groups to check (default ledger=paystream.payments,"
                             " dlq-mirror=paystream.payments.dlq)")
    health.add_argument("--timeout", type=float,
                        help=f"per-check timeout in seconds ({_default('timeout_s')})")
    health.add_argument("--json", action="store_true", help="print JSON instead of a table")
    health.add_argument("--serve-metrics", type=int, metavar="PORT",
                        help="serve the checks as Prometheus gauges on PORT (until SIGTERM)")
    health.add_argument("--bind", default=None,
                        help="address for --serve-metrics (loopback unless told otherwise)")
    health.add_argument("--reconcile-every", type=float, default=0.0, metavar="SECONDS",
                        help="with --serve-metrics: also run a full reconciliation this "
                             "often (0: never; it reads the whole journal)")
    health.set_defaults(func=_health)


def _add_housekeeping(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    hk = sub.add_parser("housekeeping",
                        help="drop processed_events' expired daily partitions and delete"
                             " the older final entries left in its others, delivered "
                             "notifications and refused deliveries older than their TTLs;"
                             " create notification attempts' and processed_events' daily"
                             " partitions ahead and drop the expired ones")
    hk.add_argument("--ttl-days", type=float, default=None,
                    help="keep processed_events entries younger than this (default 14)")
    hk.add_argument("--notifications-ttl-days", type=float, default=None,
                    help="keep notifications younger than this (default 30; at least the"
                         " notifications topic's 7-day retention)")
    hk.add_argument("--refusals-ttl-days", type=float, default=None,
                    help="keep deliveries refused at the door (`refusals list`) retried"
                         " more recently than this (default 30)")
    hk.add_argument("--batch-size", type=int, default=None,
                    help="rows per transaction (default 1000)")
    hk.add_argument("--pause", type=float, default=0.0,
                    help="seconds to sleep between batches")
    hk.add_argument("--max-batches", type=int, default=None, help="stop after this many")
    hk.add_argument("--dry-run", action="store_true", help="only count what would go")
    hk.set_defaults(func=_housekeeping)


# The names of ops.health.CHECK_NAMES, repeated here so that `paystream --help`
# does not import the Kafka client (a unit test keeps both in step).
CHECK_NAMES = ("database", "stuck_events", "oldest_unapplied", "replication_slot",
               "consumer_lag", "consumer_stops", "dead_letters", "chain_deposits",
               "chain_scan", "notifications", "statements", "connector")


def _default(field: str) -> str | None:
    """A health threshold's declared default, as its flag's help shows it."""
    return default_text(HealthSettings, field)


def _check_names() -> str:
    return ", ".join(CHECK_NAMES)


def _migrate(args: argparse.Namespace) -> int:
    from paystream.schema.migrate import apply_pending

    with database("paystream-migrate", autocommit=True, role="owner") as conn:
        applied = apply_pending(conn)
    print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    return EXIT_OK


def _reconcile(args: argparse.Namespace) -> int:
    from paystream.consumers.ledger.reconcile import reconcile
    from paystream.consumers.ledger.reconcile_report import format_report
    from paystream.reconcile_checks import FEATURE_CHECKS

    if args.chain:
        from paystream.finality import chain_reconcile_cli

        return chain_reconcile_cli.run(args)
    chain_only = [flag for flag, given in (("--network", args.network), ("--block", args.block),
                                           ("--loop", args.loop)) if given]
    if chain_only:
        print(f"paystream reconcile: {', '.join(chain_only)} needs --chain", file=sys.stderr)
        return EXIT_CANNOT_RUN

    with database("paystream-reconcile", autocommit=True) as conn:
        report = reconcile(conn, users=args.user, checks=FEATURE_CHECKS)
    print(format_report(report))
    return EXIT_OK if report.clean else EXIT_PROBLEM


def _health_settings(args: argparse.Namespace) -> HealthSettings:
    groups: tuple[tuple[str, str], ...] | None = None
    if args.group:
        pairs = []
        for item in args.group:
            group, sep, topic = item.partition("=")
            if not sep or not group or not topic:
                raise ValueError(f"--group needs GROUP=TOPIC, got {item!r}")
            pairs.append((group, topic))
        groups = tuple(pairs)
    return HealthSettings.from_env(
        stuck_after_s=args.stuck_after,
        wal_warn_mb=args.wal_warn_mb, wal_unhealthy_mb=args.wal_unhealthy_mb,
        lag_warn=args.lag_warn, lag_unhealthy=args.lag_unhealthy,
        dead_letters_warn=args.dlq_warn, dead_letters_unhealthy=args.dlq_unhealthy,
        groups=groups, timeout_s=args.timeout)


def _health(args: argparse.Namespace) -> int:
    from paystream.ops.health import Health, HealthChecker, format_table, worst
    unknown = sorted(set(args.check or ()) - set(CHECK_NAMES))
    if unknown:
        print(f"paystream health: unknown check(s) {', '.join(unknown)}; "
              f"known: {', '.join(CHECK_NAMES)}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    try:
        settings = _health_settings(args)
    except ValueError as exc:
        print(f"paystream health: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    checker = HealthChecker(settings)
    if args.serve_metrics is not None:
        return _serve_metrics(args, checker)
    results = checker.run(args.check)
    if args.json:
        print(json.dumps([{"check": r.name, "component": r.component, "what": r.check,
                           "value": r.value, "threshold": r.threshold,
                           "verdict": str(r.verdict)} for r in results], indent=2))
    else:
        print(format_table(results))
    return EXIT_PROBLEM if worst(results) is Health.UNHEALTHY else EXIT_OK


def _serve_metrics(args: argparse.Namespace, checker: HealthChecker) -> int:
    from paystream.ops.health_exporter import serve

    bind = args.bind or read_one(ProcessSettings, "metrics_host")
    serve(checker, args.check, bind, args.serve_metrics, args.reconcile_every)
    return EXIT_OK


def _housekeeping(args: argparse.Namespace) -> int:
    from paystream.ops.housekeeping import (
        DEFAULT_BATCH_SIZE,
        DEFAULT_NOTIFICATION_TTL_DAYS,
        DEFAULT_REFUSALS_TTL_DAYS,
        DEFAULT_TTL_DAYS,
        FINAL_OUTCOMES,
        PurgeResult,
        maintain_attempt_partitions,
        maintain_claim_partitions,
        purge_notifications,
        purge_processed_events,
        purge_refusals,
    )
    ttl = DEFAULT_TTL_DAYS if args.ttl_days is None else args.ttl_days
    notify_ttl = (DEFAULT_NOTIFICATION_TTL_DAYS if args.notifications_ttl_days is None
                  else args.notifications_ttl_days)
    refusals_ttl = (DEFAULT_REFUSALS_TTL_DAYS if args.refusals_ttl_days is None
                    else args.refusals_ttl_days)
    batch = DEFAULT_BATCH_SIZE if args.batch_size is None else args.batch_size
    if min(ttl, notify_ttl, refusals_ttl) < 0 or batch < 1:
        print("paystream housekeeping: --ttl-days, --notifications-ttl-days and"
              " --refusals-ttl-days must be >= 0, --batch-size >= 1", file=sys.stderr)
        return EXIT_CANNOT_RUN

    def report(result: PurgeResult, what: str, days: float) -> None:
        if result.dry_run:
            print(f"housekeeping (dry run): {result.deleted} {what} older than {days:g} days"
                  f" (before {result.cutoff.isoformat()}) would be deleted")
        else:
            print(f"housekeeping: deleted {result.deleted} {what} older than {days:g} days"
                  f" (before {result.cutoff.isoformat()}) in {result.batches} batch(es)"
                  f" of at most {batch}")

    with database("paystream-housekeeping", autocommit=True) as conn:
        # Before the rows: claims dropped with their day need no row deletes.
        claims = maintain_claim_partitions(conn, ttl_days=ttl, dry_run=args.dry_run)
        if claims.dry_run:
            print(f"housekeeping (dry run): processed_events partitions of days older than"
                  f" {ttl:g} days to drop (or keep, if a claim in it still waits):"
                  f" {claims.dropped}")
        else:
            print(f"housekeeping: processed_events partitions of days older than {ttl:g}"
                  f" days dropped: {claims.dropped}; kept (a claim in it still waits):"
                  f" {claims.kept}; created ahead: {claims.created}; skipped (lock not"
                  f" granted or day already in the default): {claims.skipped}")
        report(purge_processed_events(conn, ttl_days=ttl, batch_size=batch,
                                      pause_s=args.pause, max_batches=args.max_batches,
                                      dry_run=args.dry_run),
               f"processed_events entries with outcome {'/'.join(FINAL_OUTCOMES)}", ttl)
        # Before the intents: attempts dropped with their day need no row deletes.
        parts = maintain_attempt_partitions(conn, ttl_days=notify_ttl, dry_run=args.dry_run)
        print(f"housekeeping{' (dry run)' if parts.dry_run else ''}: notification_attempts"
              f" partitions of days older than {notify_ttl:g} days"
              f" {'to drop' if parts.dry_run else 'dropped'}: {parts.dropped}; created"
              f" ahead: {parts.created}; expired rows of the default partition deleted:"
              f" {parts.deleted}; skipped (lock not granted or day already in the"
              f" default): {parts.skipped}")
        report(purge_notifications(conn, ttl_days=notify_ttl, batch_size=batch,
                                   pause_s=args.pause, max_batches=args.max_batches,
                                   dry_run=args.dry_run),
               "notifications delivered or failed for good (with their deliveries and"
               " attempts)", notify_ttl)
        report(purge_refusals(conn, ttl_days=refusals_ttl, batch_size=batch,
                              pause_s=args.pause, max_batches=args.max_batches,
                              dry_run=args.dry_run),
               "refused deliveries not retried", refusals_ttl)
    return EXIT_OK
