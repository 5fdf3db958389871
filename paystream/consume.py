"""`paystream consume ledger | dlq-mirror | notifier | finality | scanner`: one consumer
group on the consumer runtime (consumers/), or the chain finality watcher
(finality/service.py) or chain scanner (finality/scanner/service.py), not Kafka groups: one
thread per network of PAYSTREAM_FINALITY_NETWORKS, or --network. The
notifier's process also runs a sender (notify/delivery.py) and the reminder scheduler
(notify/reminders.py) on threads of their own, unless --no-deliver (then `paystream
notify deliver` and `paystream notify remind` processes do).

`paystream consume resume GROUP` resumes a group its DLQ limit stopped (deletes its
consumer_stops row: consumers/stops.py); its consumers, idle meanwhile, rejoin within a
second and read again from the committed offsets.

The command spans both packages, so it lives here, above them. The dead letters'
commands (`paystream dlq`) are the queue's own: consumers/dead_letters/cli.py."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from paystream.consumers.settings import ConfigError, ConsumerSettings
from paystream.env import default_text, variable_name
from paystream.finality.settings import FinalitySettings
from paystream.operator_cli import EXIT_CANNOT_RUN
from paystream.schema.events import NOTIFICATIONS_TOPIC, PAYMENTS_DLQ_TOPIC, PAYMENTS_TOPIC


class GroupDefaults(NamedTuple):
    topic: str
    dlq_topic: str
    metrics_port: int
    dlq_limit: int
    batch_size: int


# What each group runs with unless told otherwise.
GROUPS: dict[str, GroupDefaults] = {
    # Batches of 2,000: fewer commits, offset commits and intents records per applied
    # event than 1,000 (Postgres -3 to -4 us an event); 5,000 saved no more Postgres and
    # cost the ledger's Python ~2 us more (docs/benchmarks.md). A batch is only as large
    # as what is waiting, so a quiet ledger still applies one at a time.
    "ledger": GroupDefaults(PAYMENTS_TOPIC, PAYMENTS_DLQ_TOPIC, 9401, 100, 2000),
    # The mirror must never lose a dead letter: limit 0 stops it at the first message
    # it cannot store, and its own DLQ topic is never written.
    "dlq-mirror": GroupDefaults(PAYMENTS_DLQ_TOPIC, PAYMENTS_DLQ_TOPIC + ".unmirrorable",
                                9402, 0, 1000),
    "notifier": GroupDefaults(NOTIFICATIONS_TOPIC, NOTIFICATIONS_TOPIC + ".dlq", 9405, 100,
                              1000),
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    consume = sub.add_parser("consume", help="run a consumer group (ledger, dlq-mirror, "
                                             "notifier) or the chain finality watcher "
                                             "(finality); `resume GROUP`: resume a group "
                                             "its DLQ limit stopped")
    consume.add_argument("kind", choices=sorted([*GROUPS, "finality", "scanner", "resume"]))
    consume.add_argument("resume_group", nargs="?", metavar="GROUP",
                         help="resume only: the consumer group to resume")
    consume.add_argument("--group", help="consumer group id (default: the kind)")
    consume.add_argument("--topic", action="append",
                         help="topic to consume (repeatable; default per kind)")
    consume.add_argument("--dlq-topic", help="where dead letters go")
    consume.add_argument("--metrics-port", type=int,
                         help="Prometheus port (0 disables; default 9401 ledger, 9402 mirror, "
                              "9404 finality, 9405 notifier, 9406 scanner)")
    consume.add_argument("--no-deliver", action="store_true",
                         help="notifier only: record the deliveries, send none (separate "
                              "`paystream notify deliver` processes send)")
    consume.add_argument("--batch-size", type=int,
                         help="most records per batch (default: " + ", ".join(
                             f"{d.batch_size} {kind}" for kind, d in GROUPS.items()) + ")")
    consume.add_argument("--batch-timeout", type=float, default=0.5,
                         help="the longest wait for a batch's first record (a batch is "
                              "handed over as soon as a record is in hand)")
    consume.add_argument("--dlq-limit", type=int,
                         help="max dead letters per window before stopping")
    consume.add_argument("--dlq-window", type=float, default=60.0, help="seconds")
    consume.add_argument("--group-protocol", choices=("classic", "consumer"),
                         default="classic",
                         help="classic = cooperative-sticky; consumer = KIP-848")
    consume.add_argument("--session-timeout-ms", type=int, default=10_000)
    consume.add_argument("--max-poll-interval-ms", type=int, default=60_000)
    consume.add_argument("--backoff-max", type=float, default=10.0,
                         help="longest retry delay in seconds")
    consume.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE",
                         help="extra librdkafka property (auto-commit settings are refused)")
    consume.add_argument("--network", action="append",
                         help="finality and scanner: network to watch (repeatable; default "
                              f"{variable_name(FinalitySettings, 'networks')}, else "
                              f"{default_text(FinalitySettings, 'networks')})")
    consume.set_defaults(func=_consume)


def settings_from_args(args: argparse.Namespace) -> ConsumerSettings:
    defaults = GROUPS[args.kind]
    overrides = []
    for item in args.kafka_config:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--kafka-config needs KEY=VALUE, got {item!r}")
        overrides.append((key.strip(), value.strip()))
    return ConsumerSettings(
        group=args.group or args.kind,
        topics=tuple(args.topic or [defaults.topic]),
        dlq_topic=args.dlq_topic or defaults.dlq_topic,
        batch_size=defaults.batch_size if args.batch_size is None else args.batch_size,
        batch_timeout_s=args.batch_timeout,
        session_timeout_ms=args.session_timeout_ms,
        max_poll_interval_ms=args.max_poll_interval_ms,
        group_protocol=args.group_protocol,
        metrics_port=(defaults.metrics_port if args.metrics_port is None
                      else args.metrics_port),
        dlq_limit=defaults.dlq_limit if args.dlq_limit is None else args.dlq_limit,
        dlq_window_s=args.dlq_window,
        backoff_max_s=args.backoff_max,
        kafka_overrides=tuple(overrides),
    )


def _finality(args: argparse.Namespace) -> int:
    from paystream.consumers import metrics
    from paystream.finality import service, settings
    from paystream.logs import configure_logging

    try:
        networks = settings.from_env(networks=tuple(args.network or ()))
    except ValueError as exc:
        print(f"paystream consume finality: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    configure_logging("finality")
    metrics.serve(service.DEFAULT_METRICS_PORT if args.metrics_port is None
                  else args.metrics_port)
    return service.run(networks)


def _scanner(args: argparse.Namespace) -> int:
    """The chain scanner (finality/scanner/service.py): a thread per network."""
    from paystream.consumers import metrics
    from paystream.finality.scanner import service as scan_service
    from paystream.finality.scanner import settings as scan_settings
    from paystream.logs import configure_logging

    try:
        networks = scan_settings.from_env(args.network)
    except ValueError as exc:
        print(f"paystream consume scanner: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    configure_logging("scanner")
    metrics.serve(scan_service.DEFAULT_METRICS_PORT if args.metrics_port is None
                  else args.metrics_port)
    return scan_service.run(networks)


def _resume(args: argparse.Namespace) -> int:
    """Delete the group's stop (as the operator's role) and say what was deleted."""
    from paystream.consumers import stops
    from paystream.operator_cli import EXIT_OK, transaction

    group = args.resume_group
    if not group:
        print("paystream consume resume: name the group (e.g. `paystream consume resume "
              "ledger`)", file=sys.stderr)
        return EXIT_CANNOT_RUN
    with transaction("paystream-consume-resume") as cur:
        stop = stops.remove(cur, group)
    if stop is None:
        print(f"group {group} is not stopped: nothing to resume")
        return EXIT_OK
    print(f"resumed group {group}: deleted its stop ({stop.reason}, recorded "
          f"{stop.stopped_at.isoformat()} by {stop.host} pid {stop.pid}): {stop.detail}\n"
          "its consumers rejoin within a second, read again from the committed offsets "
          "(from the record the limit stopped at) and start a fresh DLQ window")
    return EXIT_OK


def _consume(args: argparse.Namespace) -> int:
    if args.kind == "resume":
        return _resume(args)
    if args.resume_group:
        print(f"paystream consume {args.kind}: unexpected argument {args.resume_group!r}",
              file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.kind == "finality":
        return _finality(args)
    if args.kind == "scanner":
        return _scanner(args)
    # Imported here: `paystream --help` must not need a broker client.
    from paystream.consumers import metrics
    from paystream.consumers.client import consumer_config
    from paystream.consumers.runtime import BatchConsumer
    from paystream.logs import configure_logging

    try:
        settings = settings_from_args(args)
        consumer_config(settings)  # refuse a bad configuration before anything starts
    except ConfigError as exc:
        print(f"paystream consume: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    configure_logging(f"consumer-{settings.group}")
    handler: Any
    if args.kind == "ledger":
        handler = ledger_handler()
    elif args.kind == "notifier":
        from paystream.consumers.notifier import NotifierHandler
        from paystream.notify.seal import process_sealer
        handler = NotifierHandler(process_sealer())
        if not args.no_deliver:
            return _with_sender(settings, handler)
    else:
        from paystream.consumers.dead_letters.mirror import DlqMirrorHandler
        handler = DlqMirrorHandler()
    metrics.serve(settings.metrics_port)
    return BatchConsumer(settings, handler).run()


def ledger_handler(also: Sequence[str] = ()) -> Any:
    """The ledger group's handler: its settings, and the features that react to each
    batch in its transaction (consumers/ledger/consequences.py): each declared in its
    feature's folder, found here without being named, built at start-up and run in the
    order they declare (paystream/ledger_consequences.py; a declaration that cannot be
    ordered refuses to start). `also`: packages searched beside the product's (a
    test's own)."""
    from paystream import ledger_consequences
    from paystream.consumers.ledger.handler import LedgerHandler
    from paystream.consumers.ledger.reconcile import HotPathReconciler
    from paystream.consumers.ledger.settings import LedgerSettings
    from paystream.notify.intents import now_text

    return LedgerHandler(LedgerSettings.from_env(), HotPathReconciler.from_env(),
                         ledger_consequences.build(also), now_text)


def _with_sender(settings: ConsumerSettings, handler: Any) -> int:
    """The notifier consumer on this thread, a sender on another: the consumer records
    slots, the sender delivers them; neither waits for the other (notify/delivery.py)."""
    from paystream.consumers import metrics
    from paystream.consumers.runtime import BatchConsumer
    from paystream.notify import reminders
    from paystream.notify.delivery import Sender
    from paystream.notify.settings import NotifySettings, ReminderSettings

    # A bad setting refuses to start (exit 2), before anything runs.
    notify_settings, remind_settings = NotifySettings.from_env(), ReminderSettings.from_env()
    stop = threading.Event()
    threads = [threading.Thread(target=_or_stop, args=(Sender(notify_settings).run, stop),
                                name="notify-sender", daemon=True),
               threading.Thread(target=_or_stop,
                                args=(lambda s: reminders.run(remind_settings, s), stop),
                                name="notify-reminders", daemon=True)]
    metrics.serve(settings.metrics_port)
    for thread in threads:
        thread.start()
    try:
        return BatchConsumer(settings, handler).run()
    finally:
        # The attempts in flight end within their timeout and are recorded.
        stop.set()
        for thread in threads:
            thread.join(timeout=notify_settings.timeout_s + 5)


def _or_stop(loop: Callable[[threading.Event], None], stop: threading.Event) -> None:
    """Run a notifier thread's loop; if it dies of a bug, stop the whole process (SIGTERM:
    the consumer ends cleanly, `paystream run` restarts it) rather than keep recording
    slots that nobody sends."""
    import os
    import signal

    import structlog

    try:
        loop(stop)
    except Exception:
        structlog.get_logger("paystream.consume").exception("notifier_thread_died")
        os.kill(os.getpid(), signal.SIGTERM)
