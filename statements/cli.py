"""`paystream statements import|list|show|match|resolve|approve` and `paystream export`.

Exit codes (paystream/operator_cli.py): 0 done / nothing unresolved; 1 `show` found
unresolved differences, or a decision was refused; 2 it could not run (a malformed file,
names its line; bad arguments; the database unreachable).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from paystream.operator_cli import (
    EXIT_CANNOT_RUN,
    EXIT_OK,
    EXIT_PROBLEM,
    format_table,
    iso_moment,
    transaction,
)

if TYPE_CHECKING:
    from paystream.statements.reads import LineRow

PROVIDERS = ("payments",)  # the gateway whose layout docs/statements.md documents
SHOW_LIMIT = 100_000  # differences printed; a statement with more needs the console


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    st = sub.add_parser("statements", help="settlement statements: import, match, resolve")
    ss = st.add_subparsers(dest="statements_cmd", required=True, metavar="ACTION")
    imp = ss.add_parser("import", help="import a statement CSV (once per file) and match it")
    imp.add_argument("--provider", required=True, choices=PROVIDERS)
    imp.add_argument("file", type=Path)
    imp.set_defaults(func=_import)
    ss.add_parser("list", help="statements, newest first").set_defaults(func=_list)
    show = ss.add_parser("show", help="one line per difference; exit 1 while any is "
                                      "unresolved")
    show.add_argument("statement_id", type=int)
    show.add_argument("--all", action="store_true", help="resolved differences too")
    show.set_defaults(func=_show)
    mt = ss.add_parser("match", help="match again with the current tolerances (decided"
                                     " lines keep their result)")
    mt.add_argument("statement_id", type=int)
    mt.set_defaults(func=_match)
    res = ss.add_parser("resolve", help="act on one difference (docs/statements.md)")
    res.add_argument("statement_id", type=int)
    res.add_argument("target", metavar="LINE_ID", help="the line's id (for missing_at_provider"
                                                       ": our event id)")
    res.add_argument("--reason", required=True, help="why, for the record")
    res.add_argument("--user", help="missing_in_books: whose event (default the line's "
                                    "user_id column, or the reversed event's user)")
    res.add_argument("--reverses", help="missing_in_books refund/chargeback: the event it "
                                        "reverses (default the line's reverses column)")
    res.add_argument("--revert", action="store_true",
                     help="missing_at_provider: revert our event instead of acknowledging")
    res.add_argument("--actor", default=None, help="who decides (default the OS user)")
    res.set_defaults(func=_resolve)
    ap = ss.add_parser("approve", help="approve a proposed fee adjustment (not your own)")
    ap.add_argument("decision_id", type=int)
    ap.add_argument("--reason", required=True)
    ap.add_argument("--actor", default=None, help="who approves (default the OS user)")
    ap.set_defaults(func=_approve)
    _register_export(sub)


def _register_export(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from paystream.statements.export import KINDS

    ex = sub.add_parser("export", help="the books for finance, CSV or Parquet, from one "
                                       "snapshot")
    ex.add_argument("kind", choices=KINDS)
    ex.add_argument("--from", dest="start", type=iso_moment, required=True,
                    help="ISO 8601, inclusive")
    ex.add_argument("--to", dest="end", type=iso_moment, required=True,
                    help="ISO 8601, exclusive")
    ex.add_argument("--format", choices=("csv", "parquet"), default="csv")
    ex.add_argument("--output", "-o", type=Path, help="file to write (default stdout, csv"
                                                      " only)")
    ex.set_defaults(func=_export)


def _actor(args: argparse.Namespace) -> str:
    return str(args.actor or getpass.getuser())


def _import(args: argparse.Namespace) -> int:
    from paystream.statements.importer import import_statement
    from paystream.statements.layout import StatementFormatError
    from paystream.statements.settings import StatementSettings

    settings = StatementSettings.from_env()
    if not args.file.is_file():
        print(f"statements import: {args.file}: no such file", file=sys.stderr)
        return EXIT_CANNOT_RUN
    try:
        with transaction("paystream-statements") as cur:
            done = import_statement(cur, args.file, provider=args.provider,
                                    actor=getpass.getuser(), settings=settings)
    except StatementFormatError as exc:
        print(f"statements import: {args.file}: {exc}; nothing was imported", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if not done.new:
        print(f"statements import: {args.file} is statement {done.statement_id} already"
              f" ({done.lines} lines); nothing changed")
        return EXIT_OK
    print(f"statements import: statement {done.statement_id}, {done.lines} lines (import"
          f" {done.import_s:.2f} s, match {done.match_s:.2f} s); `paystream statements show"
          f" {done.statement_id}` lists the differences")
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from paystream.statements.reads import list_statements

    with transaction("paystream-statements") as cur:
        rows = list_statements(cur)
    if not rows:
        print("statements: none imported")
        return EXIT_OK
    print(format_table(("id", "provider", "file", "lines", "from", "to", "unresolved"),
                       [(str(s.statement_id), s.provider, s.file_name, str(s.line_count),
                         _moment(s.period_start), _moment(s.period_end), str(s.unresolved))
                        for s in rows], right_aligned=(0, 3, 6)))
    return EXIT_OK


def _moment(value: datetime | None) -> str:
    return "-" if value is None else value.isoformat()


def _show(args: argparse.Namespace) -> int:
    from paystream.schema.transfers import signed
    from paystream.statements import reads

    with transaction("paystream-statements") as cur:
        found = reads.statement(cur, args.statement_id)
        if found is None:
            print(f"statements show: no statement {args.statement_id}", file=sys.stderr)
            return EXIT_CANNOT_RUN
        counts = reads.counts(cur, args.statement_id)
        rows = reads.lines(cur, args.statement_id, unresolved_only=not args.all,
                           differences_only=True, limit=SHOW_LIMIT)
        payouts = reads.payouts(cur, args.statement_id)
    print(f"statement {found.statement_id} ({found.provider}, {found.file_name}): "
          + ", ".join(f"{n} {r}" for r, n in counts.items() if n)
          + f"; {found.unresolved} unresolved")
    for p in payouts:
        print(f"payout {p.payout_id}: pays {signed(-p.paid)}, its {p.lines} lines net"
              f" {signed(p.settled)}: {'sums' if p.sums else 'DOES NOT SUM'}")
    if rows:
        print(format_table(("id", "result", "state", "detail"),
                           [(r.label, r.result, _state(r), r.detail) for r in rows]))
    return EXIT_PROBLEM if found.unresolved else EXIT_OK


def _state(row: LineRow) -> str:
    if row.state is None:
        return "open"
    return f"{row.action} {row.state} (decision {row.decision_id})"


def _match(args: argparse.Namespace) -> int:
    from paystream.statements.matching import match
    from paystream.statements.reads import statement
    from paystream.statements.settings import StatementSettings

    settings = StatementSettings.from_env()
    with transaction("paystream-statements") as cur:
        found = statement(cur, args.statement_id)
        if found is None:
            print(f"statements match: no statement {args.statement_id}", file=sys.stderr)
            return EXIT_CANNOT_RUN
        match(cur, found.statement_id, found.provider, settings)
    print(f"statements match: statement {args.statement_id} matched again")
    return EXIT_OK


def _resolve(args: argparse.Namespace) -> int:
    from paystream.statements.decisions import DecisionError, resolve

    try:
        with transaction("paystream-statements") as cur:
            done = resolve(cur, args.statement_id, args.target, reason=args.reason,
                           actor=_actor(args), user_id=args.user, reverses=args.reverses,
                           revert_event=args.revert)
    except DecisionError as exc:
        print(f"statements resolve: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    what = f" event {done.event_id}" if done.event_id else ""
    print(f"statements resolve: decision {done.decision_id}: {done.action} {done.state}{what}"
          + (f" ({done.detail})" if done.detail else "")
          + ("; approve it with `paystream statements approve "
             f"{done.decision_id} --reason ...`" if done.state == "proposed" else ""))
    return EXIT_PROBLEM if done.state == "refused" else EXIT_OK


def _approve(args: argparse.Namespace) -> int:
    from paystream.statements.decisions import DecisionError, approve

    try:
        with transaction("paystream-statements") as cur:
            done = approve(cur, args.decision_id, actor=_actor(args), reason=args.reason)
    except DecisionError as exc:
        print(f"statements approve: {exc}", file=sys.stderr)
        return EXIT_PROBLEM
    print(f"statements approve: decision {done.decision_id}: adjustment {done.event_id} of"
          f" {done.amount}")
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    from paystream.statements.export import ExportError, export

    if args.format == "parquet" and args.output is None:
        print("export: --format parquet needs --output FILE", file=sys.stderr)
        return EXIT_CANNOT_RUN
    try:
        rows = export(args.kind, args.start, args.end, args.format, args.output)
    except ExportError as exc:
        print(f"export: {exc}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    if args.output is not None:
        print(f"export: {rows} {args.kind} rows to {args.output}", file=sys.stderr)
    return EXIT_OK
