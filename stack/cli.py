"""`paystream stack ...` commands."""

from __future__ import annotations

import argparse

from paystream.stack.settings import StackSettings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stack = sub.add_parser("stack", help="run the local stack (Postgres, Kafka, Connect)")
    ssub = stack.add_subparsers(dest="stack_command", required=True, metavar="ACTION")
    up = ssub.add_parser("up", help="install, start and configure everything (idempotent)")
    up.add_argument("--prometheus", action="store_true",
                    help="also start Prometheus, scraping every paystream process with the "
                         "alert rules loaded, and Alertmanager, which routes its alerts to "
                         "people (as PAYSTREAM_PROMETHEUS=1 does)")
    up.add_argument("--pgbouncer", action="store_true",
                    help="also start PgBouncer in transaction pooling mode (as "
                         "PAYSTREAM_PGBOUNCER=1 does); processes use it with "
                         "PAYSTREAM_DB_VIA_PGBOUNCER=1")
    up.add_argument("--brokers", type=int, metavar="N",
                    help="Kafka nodes: 1, or 3 for a replicated cluster (replication "
                         "factor 3, min ISR 2), as PAYSTREAM_KAFKA_BROKERS does; fixed when "
                         "the storage is first formatted, remembered after")
    up.add_argument("--standby", action="store_true",
                    help="Postgres as two nodes with a synchronous hot standby and "
                         "failover by pg_auto_failover (as PAYSTREAM_STANDBY=1 does); "
                         "processes need PAYSTREAM_STANDBY=1 too")
    up.set_defaults(func=_up)
    ssub.add_parser("down", help="stop every component; data is kept") \
        .set_defaults(func=_down)
    ssub.add_parser("status", help="a table of components; non-zero if one is unhealthy") \
        .set_defaults(func=_status)
    ssub.add_parser("setup", help="roles (PAYSTREAM_SUPERUSER_DATABASE_URL), Kafka "
                    "users and ACLs, migrations, topics, the connector, on services run "
                    "elsewhere (PAYSTREAM_KAFKA_BOOTSTRAP, PAYSTREAM_CONNECT_URL)") \
        .set_defaults(func=_setup)
    ssub.add_parser("compose-secrets", help="docker-compose's secrets job: generate the "
                    "passwords once, write each container's credentials into its volume") \
        .set_defaults(func=_compose_secrets)
    watchdog = ssub.add_parser("watchdog", help="restart the connector's FAILED tasks "
                               "(Connect never does), until SIGTERM; run by `paystream run`")
    watchdog.add_argument("--interval", type=float, default=5.0, help="seconds between checks")
    watchdog.set_defaults(func=_watchdog)
    logs = ssub.add_parser("logs", help="show the tail of the components' logs")
    logs.add_argument("component", nargs="?", choices=["postgres", "kafka", "connect", "anvil",
                                                        "prometheus", "alertmanager",
                                                        "pgbouncer", "standby"])
    logs.add_argument("-n", "--lines", type=int, default=50)
    logs.add_argument("-f", "--follow", action="store_true")
    logs.set_defaults(func=_logs)


# paystream.stack.stack is imported on use: `paystream --help` should not need
# confluent-kafka loaded.

def _up(args: argparse.Namespace) -> int:
    import os

    from paystream.stack import stack
    if args.standby:
        # Read by every settings class of this process and of what it starts.
        os.environ["PAYSTREAM_STANDBY"] = "1"
    # The count reaches every step through the settings; the processes the stack starts
    # are given the bootstrap servers of all its nodes, and later commands find the count
    # recorded next to the formatted storage.
    return stack.up(StackSettings.from_env(brokers=args.brokers),
                    with_prometheus=args.prometheus, with_pgbouncer=args.pgbouncer)


def _down(args: argparse.Namespace) -> int:
    from paystream.stack import stack
    return stack.down(StackSettings.from_env())


def _status(args: argparse.Namespace) -> int:
    from paystream.stack import stack
    return stack.status(StackSettings.from_env())


def _setup(args: argparse.Namespace) -> int:
    from paystream.stack import stack
    return stack.setup(StackSettings.from_env())


def _compose_secrets(args: argparse.Namespace) -> int:
    from paystream.stack import stack
    return stack.compose_secrets()


def _logs(args: argparse.Namespace) -> int:
    from paystream.stack import stack
    return stack.logs(StackSettings.from_env(), args.component, args.lines, args.follow)


def _watchdog(args: argparse.Namespace) -> int:
    import logging
    import signal
    import threading

    from paystream.connectors import task_restarter
    from paystream.logs import configure_logging

    configure_logging("connector-watchdog")
    # httpx logs every status poll through stdlib logging (not JSON, every 5 s): quiet.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    task_restarter.run(StackSettings.from_env(), stop, args.interval)
    return 0
