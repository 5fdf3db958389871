"""`paystream db …`: the stack's database cluster, its backups and restores
([operations](../docs/operations.md#backups-and-restores)).

Exit codes as every operator command's: 0 done / all is well; 1 it ran and found a
problem (a failed restore drill, a backup too old, archiving failing); 2 it could not
run (a refused folder or port, the repository unreadable).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from paystream.operator_cli import EXIT_CANNOT_RUN, EXIT_OK, EXIT_PROBLEM, format_table
from paystream.stack.settings import StackSettings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dbp = sub.add_parser("db", help="the database cluster: status, backups, restores, "
                         "the restore drill")
    dsub = dbp.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    st = dsub.add_parser("status", help="every node (role, port, data dir, pid, "
                         "replication and lag), WAL archiving, the newest backup; exit 1 "
                         "on a problem")
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    st.set_defaults(func=_status)
    bk = dsub.add_parser("backup", help="take a backup into the repository (pgBackRest); "
                         "older ones expire by the retention")
    bk.add_argument("--type", choices=("full", "diff", "incr"), default="incr",
                    help="full, differential or incremental (default incr; a first "
                         "backup is always full)")
    bk.set_defaults(func=_backup)
    ls = dsub.add_parser("backups", help="the backups in the repository, each with its "
                         "time and WAL range")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(func=_backups)
    rs = dsub.add_parser("restore", help="restore to a point in time into a scratch "
                         "cluster (never the live one), started and left running")
    rs.add_argument("--to", required=True, metavar="TIME",
                    help="the recovery target: a timestamp Postgres reads, e.g. "
                         "'2026-12-07 01:50:00+00' (transactions committed by then)")
    rs.add_argument("--into", required=True, type=Path, metavar="DIR",
                    help="a new or empty folder (not the live data dir)")
    rs.add_argument("--port", type=int, metavar="P", help="its port (default: a free one; "
                    "never the live server's)")
    rs.set_defaults(func=_restore)
    dc = dsub.add_parser("discard", help="stop a scratch cluster and delete its folder")
    dc.add_argument("dir", type=Path, metavar="DIR")
    dc.set_defaults(func=_discard)
    vr = dsub.add_parser("verify-restore", help="the restore drill: the latest backup plus "
                         "WAL restored to a scratch cluster, reconciled, every balance "
                         "compared with the live books at the restored moment; exit 0 "
                         "only when all are equal")
    vr.add_argument("--into", type=Path, metavar="DIR",
                    help="the scratch folder (default: a new one under the state dir)")
    vr.add_argument("--port", type=int, metavar="P", help="its port (default: a free one)")
    vr.add_argument("--keep", action="store_true",
                    help="leave the scratch cluster running (`paystream db discard DIR` "
                         "removes it)")
    vr.add_argument("--from-dir", type=Path, metavar="DIR",
                    help="restore nothing: compare the running scratch cluster a "
                         "`verify-restore --keep` left in DIR again")
    vr.set_defaults(func=_verify_restore)
    ff = dsub.add_parser("follow-failover", help="with a standby (run by `stack up "
                         "--standby`): after a failover, the slot on the new primary, "
                         "received events published again, the connector re-pointed; "
                         "until SIGTERM")
    ff.add_argument("--interval", type=float, default=1.0, help="seconds between checks")
    ff.set_defaults(func=_follow_failover)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _fail(command: str, message: str, code: int) -> int:
    print(f"paystream db {command}: {message}", file=sys.stderr)
    return code


def _status(args: argparse.Namespace) -> int:
    from paystream.backups import BackupSettings
    from paystream.stack import db_status

    status = db_status.read(StackSettings.from_env(), BackupSettings.from_env())
    print(json.dumps(status.as_json(), indent=2) if args.json else db_status.render(status))
    return EXIT_PROBLEM if status.problems else EXIT_OK


def _backup(args: argparse.Namespace) -> int:
    from paystream.backups import BackupSettings
    from paystream.stack import backup
    from paystream.stack.process import StackError

    started = time.monotonic()
    try:
        taken = backup.take(BackupSettings.from_env(), args.type)
    except StackError as exc:
        return _fail("backup", str(exc), EXIT_PROBLEM)
    print(f"backup {taken.label} ({taken.type}) in {time.monotonic() - started:.1f} s:"
          f" {taken.size_bytes / 2**20:.1f} MiB of database, {taken.repo_bytes / 2**20:.1f}"
          f" MiB into the repository, WAL {taken.wal_start}..{taken.wal_stop}")
    return EXIT_OK


def _backups(args: argparse.Namespace) -> int:
    from paystream.backups import BackupInfoError, BackupSettings, backups

    try:
        found = backups(BackupSettings.from_env())
    except BackupInfoError as exc:
        return _fail("backups", str(exc), EXIT_CANNOT_RUN)
    if args.json:
        print(json.dumps([{"label": b.label, "type": b.type, "prior": b.prior,
                           "started": b.started.isoformat(), "stopped": b.stopped.isoformat(),
                           "wal_start": b.wal_start, "wal_stop": b.wal_stop,
                           "size_bytes": b.size_bytes, "repo_bytes": b.repo_bytes}
                          for b in found], indent=2))
        return EXIT_OK
    if not found:
        print("backups: none in the repository (`paystream db backup --type full`)")
        return EXIT_OK
    print(format_table(
        ("label", "type", "started", "stopped", "wal_start", "wal_stop", "size_mib",
         "repo_mib"),
        [(b.label, b.type, b.started.isoformat(), b.stopped.isoformat(), b.wal_start,
          b.wal_stop, f"{b.size_bytes / 2**20:.1f}", f"{b.repo_bytes / 2**20:.1f}")
         for b in found], right_aligned={6, 7}))
    return EXIT_OK


def _restore(args: argparse.Namespace) -> int:
    from paystream.backups import BackupSettings
    from paystream.stack import scratch

    s = StackSettings.from_env()
    port = args.port or _free_port()
    started = time.monotonic()
    try:
        restored = scratch.restore(s, BackupSettings.from_env(), args.into, port,
                                   ["--type=time", f"--target={args.to}"])
    except scratch.RestoreRefusedError as exc:
        return _fail("restore", f"refused: {exc}", EXIT_CANNOT_RUN)
    except scratch.RestoreFailedError as exc:
        return _fail("restore", str(exc), EXIT_PROBLEM)
    print(f"restored to {args.to} into {restored.data_dir} in "
          f"{time.monotonic() - started:.1f} s; running on 127.0.0.1:{port} (archiving "
          f"off, no replication slot, no WAL sender). Remove it: paystream db discard "
          f"{restored.data_dir}")
    return EXIT_OK


def _discard(args: argparse.Namespace) -> int:
    from paystream.stack import scratch

    try:
        stopped = scratch.discard(StackSettings.from_env(), args.dir)
    except scratch.RestoreRefusedError as exc:
        return _fail("discard", f"refused: {exc}", EXIT_CANNOT_RUN)
    print(f"discarded {args.dir}" + (" (its server stopped)" if stopped else ""))
    return EXIT_OK


def _verify_restore(args: argparse.Namespace) -> int:
    from paystream.backups import BackupInfoError, BackupSettings
    from paystream.stack import restore_drill, scratch
    from paystream.stack.process import StackError

    s = StackSettings.from_env()
    if args.from_dir is not None:
        port = scratch.port_of(args.from_dir)
        if port is None:
            return _fail("verify-restore", f"no scratch server runs on {args.from_dir}",
                         EXIT_CANNOT_RUN)
        try:
            mark = restore_drill.Mark.load(args.from_dir)
        except restore_drill.DrillError as exc:
            return _fail("verify-restore", str(exc), EXIT_CANNOT_RUN)
        outcome = restore_drill.compare(s, scratch.Scratch(args.from_dir.resolve(), port),
                                        mark)
        print(_render(outcome))
        return EXIT_OK if outcome.ok else EXIT_PROBLEM
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    into = args.into or s.state_dir / "scratch" / f"drill-{stamp}"
    port = args.port or _free_port()
    try:
        outcome, timings = restore_drill.verify(s, BackupSettings.from_env(), into, port)
    except scratch.RestoreRefusedError as exc:
        return _fail("verify-restore", f"refused: {exc}", EXIT_CANNOT_RUN)
    except (restore_drill.DrillError, BackupInfoError, StackError) as exc:
        if not args.keep:
            _quiet_discard(s, into)
        return _fail("verify-restore", f"FAILED: {exc}", EXIT_PROBLEM)
    b = timings.backup
    print(f"verify-restore: backup {b.label} ({b.type}, stopped {b.stopped.isoformat()},"
          f" WAL from {b.wal_start}) plus WAL to restore point {outcome.mark.name}"
          f" ({outcome.mark.at}, LSN {outcome.mark.lsn}, segment {outcome.mark.segment})")
    print(f"restored into {into.resolve()} on port {port} in {timings.restore_s:.1f} s"
          f" ({b.size_bytes / 2**20:.1f} MiB of database); drill {timings.total_s:.1f} s")
    print(_render(outcome))
    if args.keep:
        print(f"kept: running on 127.0.0.1:{port}; compare again with `paystream db "
              f"verify-restore --from-dir {into}`, remove with `paystream db discard {into}`")
    else:
        _quiet_discard(s, into)
    return EXIT_OK if outcome.ok else EXIT_PROBLEM


def _quiet_discard(s: StackSettings, into: Path) -> None:
    from paystream.stack import scratch
    from paystream.stack.process import StackError

    try:
        scratch.discard(s, into, restored_here=True)
    except (OSError, StackError, scratch.RestoreRefusedError) as exc:
        # The drill's verdict stands; say what is left behind.
        print(f"could not remove {into}: {exc}", file=sys.stderr)


def _render(outcome: object) -> str:
    from paystream.schema.transfers import signed
    from paystream.stack.restore_drill import Outcome

    assert isinstance(outcome, Outcome)
    r = outcome.report
    if r.clean:
        lines = [f"reconcile on the restored copy: ok, {r.balances_checked} balances match"
                 f" their accounts' postings, {r.transfers_checked} transfers sum to zero"]
    else:
        problems = [*(f"{m.book} {m.user_id} {m.asset}: balance {m.balance}, postings"
                      f" {signed(m.journal)} ({m.problem})" for m in r.mismatches),
                    *(f"transfer {t.transfer_id} {t.asset}: {t.problem} {t.detail}"
                      for t in r.transfer_problems),
                    *(f"custody {c.network} {c.asset}: {c.problem}" for c in r.custody),
                    *(f"{f.noun}: {' '.join(row)}" for f in r.features for row in f.rows)]
        lines = [f"reconcile on the restored copy: {len(problems)} MISMATCH(ES)",
                 *(f"  {p}" for p in problems)]
    lines.append(f"compared {outcome.accounts} accounts and {outcome.balance_rows} balances"
                 f" rows with the live books at the restore point ({outcome.in_flight}"
                 " transfer(s) begun by then but committed after it, which `balances --at`"
                 " would count, left out)")
    if outcome.differences:
        lines.append(f"{len(outcome.differences)} DIFFERENCE(S) between the restored copy"
                     " and the live books:")
        lines.append(format_table(
            ("table", "owner", "asset", "kind", "live", "restored"),
            [(d.what, d.owner, d.asset, d.kind,
              "-" if d.live is None else signed(d.live),
              "-" if d.restored is None else signed(d.restored))
             for d in outcome.differences]))
    lines.append("verify-restore: " + ("ok, every balance equal" if outcome.ok else
                                       "FAILED"))
    return "\n".join(lines)


def _follow_failover(args: argparse.Namespace) -> int:
    import signal
    import threading

    from prometheus_client import start_http_server

    from paystream.logs import configure_logging
    from paystream.stack import failover_follower
    from paystream.stack.targets import port_of

    configure_logging("failover-follower")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    start_http_server(port_of("failover"), addr="127.0.0.1")
    failover_follower.run(StackSettings.from_env(), stop, args.interval)
    return EXIT_OK
