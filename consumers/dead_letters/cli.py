"""`paystream dlq list | show | replay | discard`: the operator's door to the dead letters
(the actions are replay.py's; the console's pages call the same ones).

Exit codes (paystream/operator_cli.py): 0 done; 1 no such dead letter, a refused replay
or discard; 2 the command could not run.
"""

from __future__ import annotations

import argparse
import json
import sys

from paystream.operator_cli import EXIT_OK, EXIT_PROBLEM, format_table, transaction


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dlq = sub.add_parser("dlq", help="inspect, replay and discard dead letters")
    dsub = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    p_list = dsub.add_parser("list", help="dead letters, newest first")
    p_list.add_argument("--status", default="open",
                        help="open, replayed, discarded or all (default open)")
    p_list.add_argument("--limit", type=int, default=50)
    p_list.set_defaults(func=_dlq_list)
    p_show = dsub.add_parser("show", help="one dead letter with payload and attempts")
    p_show.add_argument("id", type=int)
    p_show.set_defaults(func=_dlq_show)
    p_replay = dsub.add_parser("replay", help="send the event back through the outbox")
    p_replay.add_argument("id", type=int)
    p_replay.set_defaults(func=_dlq_replay)
    p_discard = dsub.add_parser("discard", help="close one for good, saying why (it is "
                                "never replayed; its money never applied)")
    p_discard.add_argument("id", type=int)
    p_discard.add_argument("--reason", required=True, help="why, for the record")
    p_discard.set_defaults(func=_dlq_discard)


def _dlq_list(args: argparse.Namespace) -> int:
    from paystream.consumers.dead_letters.replay import list_dead_letters

    status = None if args.status == "all" else args.status
    with transaction("paystream-dlq") as cur:
        rows = list_dead_letters(cur, status, args.limit)
    print(format_table(
        ("id", "status", "reason", "event_id", "origin"),
        [(str(r["id"]), r["status"], r["error_reason"], r["event_id"] or "-",
          f"{r['source_topic']}[{r['source_partition']}]@{r['source_offset']}")
         for r in rows],
        right_aligned={0}))
    return EXIT_OK


def _dlq_show(args: argparse.Namespace) -> int:
    from paystream.consumers.dead_letters.replay import show_dead_letter

    with transaction("paystream-dlq") as cur:
        row = show_dead_letter(cur, args.id)
    if row is None:
        print(f"no dead letter with id {args.id}", file=sys.stderr)
        return EXIT_PROBLEM
    print(json.dumps(row, indent=2, default=str))
    return EXIT_OK


def _dlq_replay(args: argparse.Namespace) -> int:
    from paystream.consumers.dead_letters.replay import ReplayRefused, replay

    try:
        with transaction("paystream-dlq") as cur:
            done = replay(cur, args.id)
    except ReplayRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    print(f"replayed dead letter {done.dlq_id}: event {done.event_id} sent again "
          f"through the outbox (message id {done.outbox_id})")
    return EXIT_OK


def _dlq_discard(args: argparse.Namespace) -> int:
    from paystream.consumers.dead_letters.replay import ReplayRefused, discard

    try:
        with transaction("paystream-dlq") as cur:
            discard(cur, args.id, args.reason)
    except ReplayRefused as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    print(f"discarded dead letter {args.id}: {args.reason.strip()}")
    return EXIT_OK
