"""`paystream shortfalls [resolve] | adjust | revert | holds list | expire`: the operator's
hand on the ledger's books (the actions are shortfalls.py's, operator_events.py's and
hold_expiry.py's; the console's ledger page calls the same ones).

`shortfalls resolve` tells the user through the `tell_shortfall_resolved` the command
line is handed at start-up (paystream/cli.py): the ledger imports no feature.

Exit codes (paystream/operator_cli.py): 0 done; 1 an open shortfall listed, a refused
adjustment or revert; 2 the command could not run.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from paystream.operator_cli import EXIT_CANNOT_RUN, EXIT_OK, EXIT_PROBLEM, format_table, transaction

if TYPE_CHECKING:
    from paystream.consumers.ledger.operator_events import Written


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sf = sub.add_parser("shortfalls",
                        help="reversed credits the balance could not cover (flagged users)")
    sf_sub = sf.add_subparsers(dest="shortfalls_cmd")
    sf.add_argument("--all", action="store_true", help="resolved ones too")
    sf.add_argument("--user", metavar="USER_ID", help="only this user's")
    sf.set_defaults(func=_shortfalls_list)
    sf_resolve = sf_sub.add_parser("resolve", help="record how one was settled; lifts the "
                                   "flag once the user has none open")
    sf_resolve.add_argument("id", type=int)
    sf_resolve.add_argument("--resolution", required=True,
                            help="what happened (recovered off-platform, written off, ...)")
    sf_resolve.set_defaults(func=_shortfalls_resolve)

    adj = sub.add_parser("adjust", help="credit or debit a user's available balance"
                         " (an adjustment event through the outbox)")
    adj.add_argument("--user", required=True, metavar="USER_ID")
    adj.add_argument("--asset", required=True)
    adj.add_argument("--amount", required=True, metavar="±X",
                     help="positive credits, negative debits (a debit available cannot"
                          " cover opens a shortfall)")
    adj.add_argument("--reason", required=True, help="why, for the record")
    adj.add_argument("--idempotency-key", required=True, metavar="KEY",
                     help="the same key is the same adjustment: a rerun records nothing")
    adj.set_defaults(func=_adjust)

    rev = sub.add_parser("revert", help="reverse what is left of an applied event"
                         " (a revert event through the outbox)")
    rev.add_argument("event_id")
    rev.add_argument("--reason", required=True, help="why, for the record")
    rev.set_defaults(func=_revert)

    hl = sub.add_parser("holds", help="withdrawals in flight")
    hl_sub = hl.add_subparsers(dest="holds_cmd", required=True, metavar="ACTION")
    hl_list = hl_sub.add_parser("list", help="open holds (oldest first)")
    hl_list.add_argument("--user", metavar="USER_ID")
    hl_list.set_defaults(func=_holds_list)
    hl_exp = hl_sub.add_parser("expire", help="void the holds past their expiry"
                               " (hold_expired events through the outbox)")
    hl_exp.add_argument("--loop", action="store_true", help="keep going, every --interval")
    hl_exp.add_argument("--interval", type=float, default=5.0, metavar="SECONDS")
    hl_exp.add_argument("--limit", type=int, default=500, help="holds per round")
    hl_exp.set_defaults(func=_holds_expire)


def _shortfalls_list(args: argparse.Namespace) -> int:
    from paystream.consumers.ledger import shortfalls

    with transaction("paystream-shortfalls") as cur:
        rows = shortfalls.list_shortfalls(cur, include_resolved=args.all, user_id=args.user)
    if not rows:
        print("shortfalls: none" + ("" if args.all else " open"))
        return EXIT_OK
    print(shortfalls.render_table(rows))
    # Open shortfalls are a problem to act on: scripts and cron see it in the exit code.
    return EXIT_PROBLEM if any(r.resolved_at is None for r in rows) else EXIT_OK


def _shortfalls_resolve(args: argparse.Namespace) -> int:
    from paystream.consumers.ledger import shortfalls
    from paystream.schema.amounts import format_amount

    try:
        with transaction("paystream-shortfalls") as cur:
            row, still_flagged = shortfalls.resolve(cur, args.id, args.resolution,
                                                     args.tell_shortfall_resolved)
    except shortfalls.ResolveRefused as exc:
        print(f"shortfalls resolve: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    state = ("still flagged: other shortfalls are open" if still_flagged
             else "no longer flagged: withdrawals are accepted again")
    print(f"shortfall {row.id} resolved: {row.user_id} owed {format_amount(row.amount)} "
          f"{row.asset}; {state}")
    return EXIT_OK


def _written(command: str, written: Written) -> None:
    from paystream.schema.amounts import format_amount

    event = written.event
    state = ("recorded" if written.outcome.value == "accepted"
             else "already recorded (nothing written)")
    print(f"{command}: {event.event_id} ({event.event_type.value} of"
          f" {format_amount(event.amount)} {event.asset} for {event.user_id}) {state};"
          f" trace {written.trace_id}. The ledger applies it: `paystream balances --user"
          f" {event.user_id}`")


def _adjust(args: argparse.Namespace) -> int:
    from decimal import Decimal, InvalidOperation

    from paystream.consumers.ledger.operator_events import OperatorEventError, adjust
    from paystream.schema.amounts import AmountError, parse_amount

    text = args.amount.strip()
    try:
        Decimal(text)
        magnitude = parse_amount(text.lstrip("+-"))
    except (InvalidOperation, AmountError) as exc:
        print(f"adjust: --amount {text!r}: {exc or 'not a decimal number'}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    amount = -magnitude if text.startswith("-") else magnitude
    try:
        with transaction("paystream-adjust") as cur:
            written = adjust(cur, user_id=args.user, asset=args.asset, amount=amount,
                             reason=args.reason, idempotency_key=args.idempotency_key)
    except OperatorEventError as exc:
        print(f"adjust: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    _written("adjust", written)
    return EXIT_OK


def _revert(args: argparse.Namespace) -> int:
    from paystream.consumers.ledger.operator_events import OperatorEventError, revert

    try:
        with transaction("paystream-revert") as cur:
            written = revert(cur, args.event_id, args.reason)
    except OperatorEventError as exc:
        print(f"revert: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    _written("revert", written)
    return EXIT_OK


def _holds_list(args: argparse.Namespace) -> int:
    from paystream.schema.amounts import format_amount
    from paystream.schema.holds import open_holds

    with transaction("paystream-holds") as cur:
        rows = open_holds(cur, args.user)
    if not rows:
        print("holds: none open")
        return EXIT_OK
    print(format_table(("hold_id", "user", "asset", "amount", "fee", "state", "expires_at"),
                       [(h.hold_id, h.user_id, h.asset, format_amount(h.amount),
                         format_amount(h.fee) if h.fee else "0", h.state.value,
                         expires.isoformat()) for h, expires in rows],
                       right_aligned={3, 4}))
    return EXIT_OK


def _holds_expire(args: argparse.Namespace) -> int:
    from paystream.consumers.ledger.hold_expiry import expire_round, run_forever

    if args.loop:
        run_forever(args.limit, args.interval)
    written = expire_round(args.limit)
    print(f"holds expire: {len(written)} hold(s) past their expiry voided")
    return EXIT_OK
