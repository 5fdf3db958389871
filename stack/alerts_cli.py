"""`paystream alerts [list | silence | expire]`: the stack's Alertmanager from a shell,
as the console's alerts page shows it (stack/alerts.py).

Exit codes (paystream/operator_cli.py): 0 done (`list`: nothing firing); 1 `list`: an
alert fires, or a silence was refused; 2 Alertmanager does not answer."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import TYPE_CHECKING

from paystream.operator_cli import EXIT_CANNOT_RUN, EXIT_OK, EXIT_PROBLEM, format_table

if TYPE_CHECKING:  # imported on use: `paystream --help` stays light
    from paystream.stack.alertmanager import AlertmanagerConfig
    from paystream.stack.alerts import Alert


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    alerts = sub.add_parser("alerts", help="the alerts Alertmanager holds, and silences")
    asub = alerts.add_subparsers(dest="alerts_command", metavar="ACTION")
    alerts.set_defaults(func=_list, expired=False)
    lst = asub.add_parser("list", help="firing alerts (silenced, inhibited) and silences")
    lst.add_argument("--expired", action="store_true", help="expired silences too")
    lst.set_defaults(func=_list)
    sil = asub.add_parser("silence", help="silence an alert for a while, saying why")
    sil.add_argument("--alert", required=True, metavar="ALERTNAME")
    sil.add_argument("--group", metavar="GROUP", help="only this consumer group's")
    sil.add_argument("--matcher", action="append", default=[], metavar="LABEL=VALUE",
                     help="another label the alerts must have (repeatable)")
    sil.add_argument("--reason", required=True, help="why: kept with the silence")
    sil.add_argument("--for", dest="duration", default="1h", metavar="DURATION",
                     help="how long: 30m, 2h, 1d (default 1h; at most 14d)")
    sil.set_defaults(func=_silence)
    exp = asub.add_parser("expire", help="end a silence now")
    exp.add_argument("silence_id", metavar="SILENCE_ID")
    exp.set_defaults(func=_expire)


def _config() -> AlertmanagerConfig:
    from paystream.stack.alertmanager import AlertmanagerConfig

    return AlertmanagerConfig.from_env()


def _list(args: argparse.Namespace) -> int:
    from paystream.stack import alerts

    cfg = _config()
    try:
        held, silences = alerts.alerts(cfg), alerts.silences(cfg, expired=args.expired)
    except alerts.AlertmanagerUnavailable as exc:
        print(f"paystream alerts: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    rows = [(a.name, a.severity or "-", a.group or "-", _state(a), a.starts_at, a.summary)
            for a in held]
    print(format_table(("alert", "severity", "group", "state", "since", "summary"), rows))
    print()
    print(format_table(("silence", "state", "matchers", "by", "until", "reason"),
                       [(s.id, s.state, s.matchers, s.created_by, s.ends_at, s.comment)
                        for s in silences]))
    firing = any(a.state == "active" and a.name != "Watchdog" for a in held)
    return EXIT_PROBLEM if firing else EXIT_OK


def _state(alert: Alert) -> str:
    if alert.silenced_by:
        return "silenced"
    if alert.inhibited_by:
        return "inhibited"
    return "firing" if alert.state == "active" else alert.state


def _silence(args: argparse.Namespace) -> int:
    from paystream.stack import alerts

    matchers = {"alertname": args.alert}
    if args.group:
        matchers["group"] = args.group
    for pair in args.matcher:
        name, sep, value = pair.partition("=")
        if not sep:
            print(f"paystream alerts silence: --matcher {pair!r} is not LABEL=VALUE",
                  file=sys.stderr)
            return EXIT_CANNOT_RUN
        matchers[name.strip()] = value
    try:
        made = alerts.silence(_config(), matchers, args.reason,
                              alerts.parse_duration(args.duration),
                              f"{getpass.getuser()} (paystream alerts)")
    except alerts.SilenceRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    except alerts.AlertmanagerUnavailable as exc:
        print(f"paystream alerts: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    print(made)
    return EXIT_OK


def _expire(args: argparse.Namespace) -> int:
    from paystream.stack import alerts

    try:
        alerts.expire(_config(), args.silence_id)
    except alerts.SilenceRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    except alerts.AlertmanagerUnavailable as exc:
        print(f"paystream alerts: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    print(f"expired {args.silence_id}")
    return EXIT_OK
