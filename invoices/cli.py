"""`paystream invoices list | show | extend | cancel | expire`: the operator's invoice
commands. They parse and call: list and show are invoices/reads.py's (the merchant
API's answers), cancel is invoices/create.py's (the API's rule), extend is
invoices/operator.py's, expire the scheduler's (invoices/expiry.py). Each prints a table
or, with --json, the JSON the API answers.

Exit codes (paystream/operator_cli.py): 0 done; 1 refused, the message says why (an
unknown invoice, one that is not open, one with money credited); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from paystream.operator_cli import (
    EXIT_CANNOT_RUN,
    EXIT_OK,
    EXIT_PROBLEM,
    format_table,
    transaction,
)

if TYPE_CHECKING:
    from paystream.schema.db import Cursor


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inv = sub.add_parser("invoices", help="merchants' invoices: list, show, extend, cancel,"
                         " expire")
    inv_sub = inv.add_subparsers(dest="invoices_cmd", required=True, metavar="ACTION")
    ls = inv_sub.add_parser("list", help="invoices, newest first")
    ls.add_argument("--status", metavar="STATUS", help="a state (new, processing, settled,"
                    " expired, invalid) or an additional status (paid_partial, ...)")
    ls.add_argument("--user", metavar="USER_ID")
    ls.add_argument("--order", metavar="ORDER_ID")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(func=_list)
    show = inv_sub.add_parser("show", help="one invoice with its payments and history")
    show.add_argument("invoice_id")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=_show)
    ext = inv_sub.add_parser("extend", help="move an open invoice's deadline later (its"
                             " reminders start a new cycle)")
    ext.add_argument("invoice_id")
    ext.add_argument("--by", required=True, metavar="DURATION",
                     help="how much later: 1h, 30m, 90s or seconds")
    ext.add_argument("--json", action="store_true", help="print JSON")
    ext.set_defaults(func=_extend)
    cancel = inv_sub.add_parser("cancel", help="make an open invoice with nothing credited"
                                " invalid (its user is told: invoice.invalid)")
    cancel.add_argument("invoice_id")
    cancel.add_argument("--json", action="store_true", help="print JSON")
    cancel.set_defaults(func=_cancel)
    exp = inv_sub.add_parser("expire", help="expire the open invoices past their deadline"
                             " with nothing pending (invoice.* intents through the outbox)")
    exp.add_argument("--loop", action="store_true", help="keep going, every --interval")
    exp.add_argument("--interval", type=float, default=5.0, metavar="SECONDS")
    exp.add_argument("--limit", type=int, default=500, help="invoices per round")
    exp.set_defaults(func=_expire)


LIST_LIMIT_MAX = 1000


def _run(command: str, action: Callable[[Cursor], Any]) -> tuple[int, Any]:
    """`action` in one transaction; a refusal (paystream/refusals.py) printed, exit 1
    (2 for a bad argument)."""
    from paystream.refusals import Invalid, Refused

    try:
        with transaction("paystream-invoices") as cur:
            return EXIT_OK, action(cur)
    except Refused as exc:
        print(f"invoices {command}: {exc.detail}", file=sys.stderr)
        return (EXIT_CANNOT_RUN if isinstance(exc, Invalid) else EXIT_PROBLEM), None


def _table(invoices: list[dict[str, Any]]) -> str:
    return format_table(
        ("invoice_id", "user", "asset", "amount", "paid", "due", "state", "expires_at",
         "order"),
        [(i["invoice_id"], i["user_id"], i["asset"], i["amount"], i["amount_paid"],
          i["amount_due"], i["state"] + (f" ({i['additional_status']})"
                                         if i["additional_status"] else ""),
          i["expires_at"], i["order_id"] or "-") for i in invoices],
        right_aligned={3, 4, 5})


def _list(args: argparse.Namespace) -> int:
    from paystream.invoices import reads

    if not 1 <= args.limit <= LIST_LIMIT_MAX:
        print(f"invoices list: --limit must be 1 to {LIST_LIMIT_MAX}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    code, found = _run("list", lambda cur: reads.page(
        cur, status=args.status, order_id=args.order, user_id=args.user, limit=args.limit))
    if code != EXIT_OK:
        return code
    invoices, _ = found
    if args.json:
        print(json.dumps(invoices, indent=2))
    else:
        print(_table(invoices) if invoices else "invoices: none")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    from paystream.invoices import reads
    from paystream.refusals import NotFound

    def found(cur: Cursor) -> dict[str, Any]:
        shown = reads.invoice(cur, args.invoice_id)
        if shown is None:
            raise NotFound(f"no invoice {args.invoice_id[:200]!r}")
        return shown

    code, shown = _run("show", found)
    if code != EXIT_OK:
        return code
    if args.json:
        print(json.dumps(shown, indent=2))
        return EXIT_OK
    print(_table([shown]))
    print(f"\npending {shown['amount_pending']}; tolerance {shown['payment_tolerance_pct']} %"
          f"; created {shown['created_at']}"
          + (f"; {shown['network']} {shown['address']}" if shown["address"] else ""))
    print("\npayments:")
    print(format_table(("event_id", "amount", "refunded", "state", "seen_at", "late"),
                       [(p["event_id"], p["amount"], p["refunded"], p["state"], p["seen_at"],
                         "late" if p["late"] else "on time") for p in shown["payments"]],
                       right_aligned={1, 2}) if shown["payments"] else "none")
    print("\nhistory:")
    print(format_table(("at", "state", "additional", "expires_at", "cause"),
                       [(h["at"], h["state"], h["additional_status"] or "-", h["expires_at"],
                         h["cause"]) for h in shown["history"]]))
    return EXIT_OK


def _extend(args: argparse.Namespace) -> int:
    from paystream.invoices import operator, reads
    from paystream.notify.settings import parse_duration

    try:
        by_s = parse_duration(args.by)
    except ValueError as exc:
        print(f"invoices extend: --by {args.by!r}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    code, done = _run("extend", lambda cur: operator.extend(cur, args.invoice_id, by_s))
    if code != EXIT_OK:
        return code
    if args.json:
        print(json.dumps(reads.summary(done.after), indent=2))
    else:
        print(f"invoices extend: {done.after.invoice_id} now expires at"
              f" {done.after.expires_at.isoformat()} (was {done.before.expires_at.isoformat()});"
              " its reminders start a new cycle")
    return EXIT_OK


def _cancel(args: argparse.Namespace) -> int:
    from paystream.invoices import create, reads
    from paystream.notify.intents import now_text
    from paystream.notify.seal import process_sealer

    code, after = _run("cancel", lambda cur: create.cancel(
        cur, args.invoice_id, created_at_text=now_text(), sealer=process_sealer()))
    if code != EXIT_OK:
        return code
    if args.json:
        print(json.dumps(reads.summary(after), indent=2))
    else:
        print(f"invoices cancel: {after.invoice_id} is {after.state.value}; its user is told"
              " (invoice.invalid)")
    return EXIT_OK


def _expire(args: argparse.Namespace) -> int:
    from paystream.invoices.expiry import expire_round, run_forever
    from paystream.notify.seal import process_sealer

    if args.limit < 1 or args.interval <= 0:
        print("invoices expire: --limit must be >= 1 and --interval > 0", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.loop:
        run_forever(args.limit, args.interval, process_sealer())
    done = expire_round(args.limit, process_sealer())
    print(f"invoices expire: {len(done)} invoice(s) past their deadline expired")
    return EXIT_OK
