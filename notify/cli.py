"""`paystream endpoints add|list|disable|enable|rotate-secret` (the operator's webhook
endpoints), `paystream notifications list|show|redeliver|recover` (the deliveries) and
`paystream notify deliver` (a sender process of its own; `paystream consume notifier`
runs one in its process already)."""

from __future__ import annotations

import argparse
import sys

from paystream.env import default_text, variable_name
from paystream.notify.settings import NotifySettings
from paystream.operator_cli import (
    EXIT_CANNOT_RUN,
    EXIT_OK,
    database,
    format_table,
    iso_moment,
    transaction,
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ep = sub.add_parser("endpoints", help="webhook endpoints that receive notifications")
    ep_sub = ep.add_subparsers(dest="endpoints_cmd", required=True, metavar="ACTION")
    add = ep_sub.add_parser("add", help="add an endpoint; prints its whsec_ secret once")
    add.add_argument("--url", required=True, help="http(s) URL the POSTs go to")
    add.add_argument("--user", help="only this user's notifications")
    add.add_argument("--events", help="comma-separated types or families: deposit.*,"
                                      "withdrawal.rejected (default: every type)")
    owner = add.add_mutually_exclusive_group()
    owner.add_argument("--merchant", metavar="MERCHANT_ID",
                       help="only this merchant's users' notifications (default: m_default)")
    owner.add_argument("--every-merchant", action="store_true",
                       help="every merchant's notifications (an operator's endpoint)")
    add.set_defaults(func=_add)
    ep_sub.add_parser("list", help="the endpoints and their state").set_defaults(func=_list)
    dis = ep_sub.add_parser("disable", help="stop delivering to an endpoint")
    dis.add_argument("endpoint_id")
    dis.add_argument("--reason", default="disabled by an operator")
    dis.set_defaults(func=_disable)
    ena = ep_sub.add_parser("enable", help="deliver to a disabled endpoint again")
    ena.add_argument("endpoint_id")
    ena.set_defaults(func=_enable)
    rot = ep_sub.add_parser("rotate-secret",
                            help="a new secret; the old one also signs for a while")
    rot.add_argument("endpoint_id")
    rot.add_argument("--overlap", type=float, metavar="SECONDS",
                     help="how long the old secret still signs (default "
                          f"{variable_name(NotifySettings, 'rotation_overlap_s')}, "
                          f"{default_text(NotifySettings, 'rotation_overlap_s')})")
    rot.set_defaults(func=_rotate)

    nt = sub.add_parser("notifications", help="webhook deliveries: list, show, send again")
    nt_sub = nt.add_subparsers(dest="notifications_cmd", required=True, metavar="ACTION")
    ls = nt_sub.add_parser("list", help="the latest deliveries")
    ls.add_argument("--user")
    ls.add_argument("--state", choices=("pending", "delivered", "failed"))
    ls.add_argument("--limit", type=int, default=50)
    ls.set_defaults(func=_notifications_list)
    sh = nt_sub.add_parser("show", help="an intent, its deliveries and every attempt")
    sh.add_argument("intent_id")
    sh.set_defaults(func=_notifications_show)
    rd = nt_sub.add_parser("redeliver", help="send an intent again (same webhook-id)")
    rd.add_argument("intent_id")
    rd.add_argument("--endpoint", help="only to this endpoint (made if it had none)")
    rd.set_defaults(func=_notifications_redeliver)
    rc = nt_sub.add_parser("recover", help="send again what failed for good since T")
    rc.add_argument("--since", type=iso_moment, required=True, metavar="TIMESTAMP",
                    help="ISO 8601; deliveries made since then (UTC without an offset)")
    rc.add_argument("--endpoint", help="only this endpoint's")
    rc.set_defaults(func=_notifications_recover)

    notify = sub.add_parser("notify", help="the notification sender")
    n_sub = notify.add_subparsers(dest="notify_cmd", required=True, metavar="ACTION")
    deliver = n_sub.add_parser("deliver", help="claim and send due deliveries until SIGTERM")
    deliver.add_argument("--metrics-port", type=int, default=0,
                         help="Prometheus port (0: none)")
    deliver.set_defaults(func=_deliver)
    remind = n_sub.add_parser("remind", help="make the scheduled reminders that are due")
    remind.add_argument("--once", action="store_true",
                        help="one scan, then exit (default: every PAYSTREAM_REMIND_PERIOD_S)")
    remind.set_defaults(func=_remind)


def _refused(action: str, exc: Exception) -> int:
    print(f"paystream endpoints {action}: {exc}", file=sys.stderr)
    return EXIT_CANNOT_RUN


def _add(args: argparse.Namespace) -> int:
    from paystream.notify import endpoints
    from paystream.schema.merchants import DEFAULT_MERCHANT

    try:
        events = endpoints.parse_events(args.events)
        endpoints.check_url(args.url)
        with transaction("paystream-endpoints") as cur:
            endpoint_id, secret = endpoints.add(
                cur, args.url, args.user, events, guard=NotifySettings.from_env().guard(),
                merchant_id=None if args.every_merchant else
                (args.merchant or DEFAULT_MERCHANT))
    except endpoints.EndpointRefused as exc:
        return _refused("add", exc)
    print(f"endpoint {endpoint_id} added: {args.url}"
          f" (user {args.user or 'any'}, events {','.join(events) or 'all'})")
    print(f"secret: {secret}")
    print("Keep the secret: it is shown only now. Receivers verify webhook-signature with it.")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from paystream.notify import endpoints

    with database("paystream-endpoints") as conn, conn.cursor() as cur:
        rows = endpoints.list_endpoints(cur)
    print(format_table(
        ("id", "merchant", "url", "user", "events", "state", "since"),
        [(e.endpoint_id, e.merchant_id or "every", e.url, e.user_id or "any",
          ",".join(e.event_types) or "all",
          f"disabled: {e.disabled_reason}" if e.disabled_at else
          ("failing" if e.failing_since else "enabled"),
          f"{(e.disabled_at or e.failing_since or e.created_at):%Y-%m-%d %H:%M:%S}")
         for e in rows]))
    return EXIT_OK


def _disable(args: argparse.Namespace) -> int:
    from paystream.notify import endpoints

    try:
        with transaction("paystream-endpoints") as cur:
            endpoints.disable(cur, args.endpoint_id, args.reason)
    except endpoints.EndpointRefused as exc:
        return _refused("disable", exc)
    print(f"endpoint {args.endpoint_id} disabled: nothing is sent to it until enabled")
    return EXIT_OK


def _enable(args: argparse.Namespace) -> int:
    from paystream.notify import endpoints

    try:
        with transaction("paystream-endpoints") as cur:
            endpoints.enable(cur, args.endpoint_id)
    except endpoints.EndpointRefused as exc:
        return _refused("enable", exc)
    print(f"endpoint {args.endpoint_id} enabled: its pending deliveries are sent again")
    return EXIT_OK


def _rotate(args: argparse.Namespace) -> int:
    from paystream.notify import endpoints

    overlap = (NotifySettings.from_env().rotation_overlap_s if args.overlap is None
               else args.overlap)
    if overlap < 0:
        return _refused("rotate-secret", ValueError("--overlap must be >= 0"))
    try:
        with transaction("paystream-endpoints") as cur:
            secret = endpoints.rotate_secret(cur, args.endpoint_id, overlap)
    except endpoints.EndpointRefused as exc:
        return _refused("rotate-secret", exc)
    print(f"endpoint {args.endpoint_id}: new secret (the old one also signs for {overlap:g} s)")
    print(f"secret: {secret}")
    return EXIT_OK


def _notifications_list(args: argparse.Namespace) -> int:
    from paystream.notify import operator

    if not 1 <= args.limit <= 10_000:
        print("paystream notifications list: --limit must be 1 to 10000", file=sys.stderr)
        return EXIT_CANNOT_RUN
    with database("paystream-notifications") as conn, conn.cursor() as cur:
        rows = operator.list_slots(cur, user_id=args.user, state=args.state, limit=args.limit)
    print(format_table(
        ("intent", "type", "user", "endpoint", "state", "attempts", "last", "created"),
        [(s.intent_id, s.type, s.user_id, s.endpoint_id, s.state, str(s.attempts),
          s.last_error or (str(s.last_status) if s.last_status else "-"),
          f"{s.created_at:%Y-%m-%d %H:%M:%S}") for s in rows], right_aligned={5}))
    return EXIT_OK


def _notifications_show(args: argparse.Namespace) -> int:
    import json

    from paystream.notify import operator

    try:
        with database("paystream-notifications") as conn, conn.cursor() as cur:
            intent, slots, attempts = operator.show(cur, args.intent_id)
    except operator.NotFound as exc:
        print(f"paystream notifications show: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    print(f"{intent['id']} {intent['type']} for {intent['user_id']} at {intent['created_at']}"
          f" (trace {intent['trace_id']})")
    print(json.dumps(intent["data"], indent=2, sort_keys=True))
    print(format_table(("endpoint", "state", "attempts", "delivered"),
                       [(s.endpoint_id, s.state, str(s.attempts),
                         f"{s.delivered_at:%Y-%m-%d %H:%M:%S}" if s.delivered_at else "-")
                        for s in slots]))
    print(format_table(("endpoint", "attempt", "started", "latency_s", "status", "error"),
                       [(e, str(n), f"{at:%H:%M:%S.%f}"[:-3], f"{lat:.3f}",
                         str(code) if code else "-", err or "-")
                        for e, n, at, lat, code, err in attempts], right_aligned={1, 3}))
    return EXIT_OK


def _notifications_redeliver(args: argparse.Namespace) -> int:
    from paystream.notify import operator

    try:
        with transaction("paystream-notifications") as cur:
            count = operator.redeliver(cur, args.intent_id, args.endpoint)
    except operator.NotFound as exc:
        print(f"paystream notifications redeliver: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    print(f"{args.intent_id}: {count} deliveries due again (same webhook-id); a delivery a"
          " sender holds right now is left to it")
    return EXIT_OK


def _notifications_recover(args: argparse.Namespace) -> int:
    from paystream.notify import operator

    with transaction("paystream-notifications") as cur:
        count = operator.recover(cur, args.since, args.endpoint)
    print(f"{count} failed deliveries since {args.since.isoformat()} due again")
    return EXIT_OK


def _deliver(args: argparse.Namespace) -> int:
    import signal
    import threading

    from prometheus_client import start_http_server

    from paystream.env import read_one
    from paystream.logs import configure_logging
    from paystream.notify.delivery import Sender
    from paystream.process_settings import ProcessSettings

    settings = NotifySettings.from_env()
    configure_logging("notify-sender")
    if args.metrics_port:
        start_http_server(args.metrics_port, addr=read_one(ProcessSettings, "metrics_host"))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    Sender(settings).run(stop)
    return EXIT_OK


def _remind(args: argparse.Namespace) -> int:
    import signal
    import threading

    from paystream.logs import configure_logging
    from paystream.notify import reminders
    from paystream.notify.settings import ReminderSettings
    from paystream.operator_cli import database

    settings = ReminderSettings.from_env()
    configure_logging("notify-reminders")
    if args.once:
        with database("paystream-remind", role="notifier") as conn:
            made = reminders.remind_once(conn, settings)
        print(f"{made} reminders made")
        return EXIT_OK
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    reminders.run(settings, stop)
    return EXIT_OK
