"""`paystream invoices list | show | extend | cancel | expire`: the operator's invoice
commands (the rules are paystream.invoices.operator's, the expiry scheduler
paystream.invoices.expiry's). Each prints a table or, with --json, JSON.

Exit codes (paystream/operator_cli.py): 0 done; 1 refused (the message says why: an
invoice that is not open, one with payments, an unknown id); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from paystream.operator_cli import EXIT_CANNOT_RUN, EXIT_OK, EXIT_PROBLEM, format_table, transaction

if TYPE_CHECKING:  # imported on use: `paystream --help` stays light
    from paystream.invoices.model import Invoice
    from paystream.invoices.operator import Detail


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inv = sub.add_parser("invoices", help="merchants' invoices: list, show, extend, cancel,"
                         " expire")
    inv_sub = inv.add_subparsers(dest="invoices_cmd", required=True, metavar="ACTION")
    ls = inv_sub.add_parser("list", help="invoices, newest first")
    ls.add_argument("--status", metavar="STATE",
                    help="new, processing, settled, expired or invalid")
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
    cancel = inv_sub.add_parser("cancel", help="make an open, unpaid invoice invalid (its"
                                " user is told: invoice.invalid)")
    cancel.add_argument("invoice_id")
    cancel.add_argument("--json", action="store_true", help="print JSON")
    cancel.set_defaults(func=_cancel)
    exp = inv_sub.add_parser("expire", help="expire the open invoices past their deadline"
                             " with nothing pending (invoice.* intents through the outbox)")
    exp.add_argument("--loop", action="store_true", help="keep going, every --interval")
    exp.add_argument("--interval", type=float, default=5.0, metavar="SECONDS")
    exp.add_argument("--limit", type=int, default=500, help="invoices per round")
    exp.set_defaults(func=_expire)


def _invoice_json(invoice: Invoice) -> dict[str, Any]:
    from paystream.invoices.rules import amount_due
    from paystream.schema.amounts import format_amount

    def text(amount: Any) -> str:
        return format_amount(amount) if amount > 0 else "0"

    return {"invoice_id": invoice.invoice_id, "user_id": invoice.user_id,
            "asset": invoice.asset, "amount": text(invoice.amount),
            "amount_paid": text(invoice.amount_paid),
            "amount_pending": text(invoice.amount_pending),
            "amount_due": text(amount_due(invoice.amount, invoice.amount_paid)),
            "state": invoice.state.value,
            "additional_status": invoice.additional.value if invoice.additional else None,
            "expires_at": invoice.expires_at.isoformat(),
            "created_at": invoice.created_at.isoformat(),
            "order_id": invoice.order_id, "metadata": invoice.metadata,
            "network": invoice.network, "address": invoice.address,
            "payment_tolerance_pct": str(invoice.tolerance_pct)}


def _table(invoices: list[Invoice]) -> str:
    return format_table(
        ("invoice_id", "user", "asset", "amount", "paid", "state", "expires_at", "order"),
        [(i.invoice_id, i.user_id, i.asset, j["amount"], j["amount_paid"],
          i.state.value + (f" ({i.additional.value})" if i.additional else ""),
          i.expires_at.isoformat(timespec="seconds"), i.order_id or "-")
         for i, j in ((i, _invoice_json(i)) for i in invoices)],
        right_aligned={3, 4})


def _refused(command: str, exc: Exception) -> int:
    print(f"invoices {command}: {exc}", file=sys.stderr)
    return EXIT_PROBLEM


def _list(args: argparse.Namespace) -> int:
    from paystream.invoices import operator

    try:
        with transaction("paystream-invoices") as cur:
            found = operator.listing(cur, state=args.status, user_id=args.user,
                                     order_id=args.order, limit=args.limit)
    except operator.InvoiceRefused as exc:
        print(f"invoices list: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.json:
        print(json.dumps([_invoice_json(i) for i in found], indent=2))
    elif not found:
        print("invoices: none")
    else:
        print(_table(found))
    return EXIT_OK


def _detail_json(detail: Detail) -> dict[str, Any]:
    from paystream.schema.amounts import format_amount

    return {**_invoice_json(detail.invoice),
            "payments": [{"event_id": p.event_id, "amount": format_amount(p.amount),
                          "state": p.state, "seen_at": p.seen_at.isoformat(), "late": p.late,
                          "recorded_at": p.recorded_at.isoformat(),
                          "credited_at": p.credited_at.isoformat() if p.credited_at else None}
                         for p in detail.payments],
            "history": [{"at": h.at.isoformat(), "state": h.state,
                         "additional_status": h.additional_status,
                         "expires_at": h.expires_at.isoformat(), "cause": h.cause}
                        for h in detail.history]}


def _show(args: argparse.Namespace) -> int:
    from paystream.invoices import operator

    try:
        with transaction("paystream-invoices") as cur:
            detail = operator.detail(cur, args.invoice_id)
    except operator.InvoiceRefused as exc:
        return _refused("show", exc)
    shown = _detail_json(detail)
    if args.json:
        print(json.dumps(shown, indent=2))
        return EXIT_OK
    print(_table([detail.invoice]))
    print(f"\namount due {shown['amount_due']}, pending {shown['amount_pending']}"
          f"; tolerance {shown['payment_tolerance_pct']} %")
    print("\npayments:")
    print(format_table(("event_id", "amount", "state", "seen_at", "late"),
                       [(p["event_id"], p["amount"], p["state"], p["seen_at"],
                         "late" if p["late"] else "on time") for p in shown["payments"]],
                       right_aligned={1}) if shown["payments"] else "  none")
    print("\nhistory:")
    print(format_table(("at", "state", "additional", "expires_at", "cause"),
                       [(h["at"], h["state"], h["additional_status"] or "-", h["expires_at"],
                         h["cause"]) for h in shown["history"]]))
    return EXIT_OK


def _changed(command: str, args: argparse.Namespace, what: str, changed: Any) -> int:
    if args.json:
        print(json.dumps({**_invoice_json(changed.after),
                          "intents": [i.type.value for i in changed.intents]}, indent=2))
    else:
        told = ", ".join(i.type.value for i in changed.intents) or "nothing to tell"
        print(f"invoices {command}: {changed.after.invoice_id} {what}; user told: {told}")
    return EXIT_OK


def _extend(args: argparse.Namespace) -> int:
    from paystream.invoices import operator
    from paystream.notify.settings import parse_duration

    try:
        by_s = parse_duration(args.by)
    except ValueError as exc:
        print(f"invoices extend: --by {args.by!r}: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    try:
        with transaction("paystream-invoices") as cur:
            changed = operator.extend(cur, args.invoice_id, by_s)
    except operator.InvoiceRefused as exc:
        return _refused("extend", exc)
    return _changed("extend", args, "now expires at "
                    f"{changed.after.expires_at.isoformat()} (was "
                    f"{changed.before.expires_at.isoformat()}); a new reminder cycle follows",
                    changed)


def _cancel(args: argparse.Namespace) -> int:
    from paystream.invoices import operator

    try:
        with transaction("paystream-invoices") as cur:
            changed = operator.cancel(cur, args.invoice_id)
    except operator.InvoiceRefused as exc:
        return _refused("cancel", exc)
    return _changed("cancel", args, f"is {changed.after.state.value}", changed)


def _expire(args: argparse.Namespace) -> int:
    from paystream.invoices.expiry import expire_round, run_forever

    if args.limit < 1 or args.interval <= 0:
        print("invoices expire: --limit must be >= 1 and --interval > 0", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.loop:
        run_forever(args.limit, args.interval)
    done = expire_round(args.limit)
    print(f"invoices expire: {len(done)} invoice(s) past their deadline expired")
    return EXIT_OK
