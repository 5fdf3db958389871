"""`paystream db verify-restore`: the restore drill. The latest backup plus archived WAL
restored to a scratch cluster, reconciled there, and every account compared with what
the live books said at the restored moment.

The restored moment, exactly
----------------------------
A restore replays every transaction whose commit record precedes its target in the WAL;
`balances --at T` counts the transfers whose `created_at` is at or before T, and
`created_at` is the writing transaction's *start* (`now()`): a ledger batch that began
before T and committed after it is in the second and not the first. So the drill does
not restore to a time. It marks a moment on the live cluster (`mark`), in one
transaction that:

1. takes `LOCK transfers IN SHARE MODE`: it waits for every transaction that wrote
   transfers to end, and holds new writers back for the microseconds of steps 2-3;
2. writes a named restore point (`pg_create_restore_point`), the recovery target;
3. records the moment T (clock_timestamp()), its snapshot S (pg_current_snapshot())
   and T0: the start of the oldest transaction then open (T when none), less a minute
   (a transaction starts a few microseconds before pg_stat_activity shows it: the
   minute covers one that had begun but was not shown yet).

A transfer is in the restored copy if and only if its transaction committed before the
restore point, which on the live cluster reads: `created_at < T0` (its transaction began
before every transaction open at the mark, so it had ended, committing before the lock
was granted) or its xmin is visible in S (`live_books`; S decides for everything
younger, and xmin is exact for any transaction of the last minutes). Transfers created
at or before T whose transaction committed after the mark are what `balances --at T`
counts and the restored copy rightly lacks: the drill reports their count.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from paystream.backups import Backup, BackupSettings, backups
from paystream.consumers.ledger.reconcile import Report, reconcile
from paystream.reconcile_checks import FEATURE_CHECKS
from paystream.schema.db import Cursor, connect, database_url, snapshot
from paystream.stack import backup, postgres, scratch, standby
from paystream.stack.process import StackError, wait_until
from paystream.stack.settings import StackSettings

MARK_FILE = "paystream-restore-point.json"
# (owner, asset, kind) -> the sum of that account's postings.
Books = dict[tuple[str, str, str], Decimal]


@dataclass(frozen=True)
class Mark:
    """A restore point on the live cluster and the moment it stands for."""

    name: str
    lsn: str
    segment: str  # the WAL segment holding the restore point
    at: str  # T
    oldest_open: str  # T0
    snapshot: str  # S

    def save(self, data_dir: Path) -> None:
        (data_dir / MARK_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, data_dir: Path) -> Mark:
        try:
            return cls(**json.loads((data_dir / MARK_FILE).read_text()))
        except FileNotFoundError:
            raise DrillError(f"{data_dir} has no {MARK_FILE}: it was not restored by "
                             "`paystream db verify-restore --keep`") from None


class DrillError(RuntimeError):
    """The drill could not restore or compare; the message names what is wrong."""


@dataclass(frozen=True)
class Difference:
    what: str  # "postings" (an account's sum) or "balances" (a balances row's column)
    owner: str
    asset: str
    kind: str
    live: Decimal | None
    restored: Decimal | None


@dataclass(frozen=True)
class Outcome:
    mark: Mark
    report: Report  # reconcile on the restored copy
    accounts: int  # compared
    balance_rows: int
    in_flight: int  # transfers `balances --at T` counts that committed after the mark
    differences: list[Difference]

    @property
    def ok(self) -> bool:
        return self.report.clean and not self.differences


def mark(s: StackSettings) -> Mark:
    """Steps 1-3 of the module docstring, as the live cluster's superuser; then the
    restore point's segment is switched out and awaited in the repository."""
    name = "paystream-drill-" + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    out = postgres.superuser_sql(s, (
        "BEGIN;\n"
        "SET LOCAL lock_timeout = '10s';\n"
        "LOCK TABLE public.transfers IN SHARE MODE;\n"
        "SELECT c.rp::text, pg_walfile_name(c.rp), c.now,"
        " least(c.now, (SELECT min(xact_start) FROM pg_stat_activity"
        "               WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid()))"
        "  - interval '1 minute',"
        " pg_current_snapshot()::text"
        f" FROM (SELECT pg_create_restore_point('{name}') AS rp,"
        "              clock_timestamp() AS now) c;\n"
        "COMMIT;\n"), s.pg_db)
    lsn, segment, at, oldest, snap = out.strip().split("|")
    result = Mark(name, lsn, segment, at, oldest, snap)
    postgres.superuser_sql(s, "SELECT pg_switch_wal()", s.pg_db)
    wait_until("postgres", f"WAL segment {segment} archived", lambda: _archived(s, segment),
               timeout=120)
    return result


def _archived(s: StackSettings, segment: str) -> bool:
    last = postgres.superuser_sql(s, "SELECT coalesce(last_archived_wal, '')"
                                     " FROM pg_stat_archiver", s.pg_db).strip()
    return last[:24] >= segment


# The books by account: every posting's sum per (owner, asset, kind). `live_books` adds
# the filter of the restored moment (module docstring).
_BOOKS = ("SELECT a.owner, a.asset, a.kind, sum(p.amount) FROM postings p"
          " JOIN accounts a ON a.account_id = p.account_id {join} {where}"
          " GROUP BY a.owner, a.asset, a.kind")
# A 32-bit xmin as the full xid8, in the epoch of the newest xid (valid for any xid
# younger than 2^31 transactions: every transaction open since T0).
_XMIN8 = ("(CASE WHEN ((x.e << 32) | t.xmin::text::bigint) > x.top"
          " THEN (((x.e - 1) << 32) | t.xmin::text::bigint)"
          " ELSE ((x.e << 32) | t.xmin::text::bigint) END)::text::xid8")


def live_books(cur: Cursor, m: Mark) -> tuple[Books, int]:
    """The live books at the mark, and the count of transfers `balances --at T` would
    add (begun by T, committed after the mark)."""
    params = {"t0": m.oldest_open, "snap": m.snapshot, "at": m.at}
    cur.execute(_MARKED + _BOOKS.format(join="JOIN marked d ON d.transfer_id = p.transfer_id",
                                        where="WHERE d.committed"), params)
    books = _books(cur.fetchall())
    cur.execute(_MARKED + "SELECT count(*) FROM marked"
                " WHERE NOT committed AND created_at <= %(at)s::timestamptz", params)
    row = cur.fetchone()
    return books, int(row[0]) if row else 0


# Each transfer, and whether it committed before the mark.
_MARKED = (
    "WITH x AS (SELECT top, top >> 32 AS e FROM (SELECT"
    "  pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS top) q),"
    " marked AS (SELECT t.transfer_id, t.created_at,"
    "  (t.created_at < %(t0)s::timestamptz"
    "   OR pg_visible_in_snapshot(" + _XMIN8 + ", %(snap)s::pg_snapshot)) AS committed"
    "  FROM transfers t, x) ")


def restored_books(cur: Cursor) -> tuple[Books, Books]:
    """The restored copy's books by account, and its balances rows in the same shape."""
    cur.execute(_BOOKS.format(join="", where=""))
    books = _books(cur.fetchall())
    cur.execute("SELECT user_id, asset, balance, pending, held FROM balances")
    rows: Books = {}
    for user, asset, available, pending, held in cur.fetchall():
        rows[(user, asset, "available")] = available
        rows[(user, asset, "pending")] = pending
        rows[(user, asset, "held")] = held
    return books, rows


def _books(rows: Iterable[tuple[str, str, str, Decimal]]) -> Books:
    return {(owner, asset, kind): total for owner, asset, kind, total in rows}


def differences(live: Books, restored: Books, balance_rows: Books) -> list[Difference]:
    """Every account whose sum differs (an account missing on one side counts as 0), and
    every balances row column that differs from the live account's sum."""
    found = []
    for key in sorted(live.keys() | restored.keys()):
        a, b = live.get(key, Decimal(0)), restored.get(key, Decimal(0))
        if a != b:
            found.append(Difference("postings", *key, live.get(key), restored.get(key)))
    for key in sorted(balance_rows):
        a, b = live.get(key, Decimal(0)), balance_rows[key]
        if a != b:
            found.append(Difference("balances", *key, live.get(key), b))
    return found


def compare(s: StackSettings, restored: scratch.Scratch, m: Mark,
            live: tuple[Books, int] | None = None) -> Outcome:
    """reconcile on the restored copy; its books against the live books at the mark."""
    if live is None:
        live = read_live(s, m)
    conn = connect(restored.dsn(s), application_name="paystream-verify-restore")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:  # the copy, never the live cluster compared with itself
            cur.execute("SELECT current_setting('port')::int")
            row = cur.fetchone()
        if row is None or row[0] != restored.port or restored.port == s.pg_port:
            raise DrillError(f"the connection to the copy reached port {row and row[0]}, "
                             f"not the scratch cluster's {restored.port}")
        report = reconcile(conn, checks=FEATURE_CHECKS)
        with snapshot(conn) as cur:
            books, rows = restored_books(cur)
    finally:
        conn.close()
    diffs = differences(live[0], books, rows)
    return Outcome(m, report, len(live[0].keys() | books.keys()), len(rows) // 3, live[1],
                   diffs)


def read_live(s: StackSettings, m: Mark) -> tuple[Books, int]:
    conn = connect(database_url("ops"), application_name="paystream-verify-restore")
    try:
        conn.autocommit = True
        with snapshot(conn) as cur:
            return live_books(cur, m)
    finally:
        conn.close()


@dataclass(frozen=True)
class Timings:
    backup: Backup
    restore_s: float
    total_s: float


def verify(s: StackSettings, settings: BackupSettings, data_dir: Path, port: int,
           ) -> tuple[Outcome, Timings]:
    """The drill: mark, check the WAL is there, restore to the mark, compare. The
    scratch cluster is left running (the caller discards it unless asked to keep it)."""
    started = time.monotonic()
    scratch.check_target(s, data_dir, port)
    found = backups(settings)
    if not found:
        raise DrillError("the repository holds no backup: `paystream db backup`")
    latest = found[-1]
    # With a standby, the restore point is marked on whichever node is the primary.
    m = mark(standby.on_primary(s, standby.StandbySettings.from_env()) if s.standby else s)
    missing = backup.missing_wal(settings, latest.wal_start, m.segment)
    if missing:
        raise DrillError(
            f"the repository lacks WAL segment(s) {', '.join(missing[:10])}"
            f"{' …' if len(missing) > 10 else ''}: backup {latest.label} cannot be"
            f" replayed from {latest.wal_start} to the restore point in {m.segment}")
    live = read_live(s, m)
    restore_started = time.monotonic()
    try:
        restored = scratch.restore(s, settings, data_dir, port,
                                   ["--type=name", f"--target={m.name}",
                                    f"--set={latest.label}"])
    except (scratch.RestoreFailedError, StackError) as exc:
        raise DrillError(str(exc)) from None
    restore_s = time.monotonic() - restore_started
    m.save(restored.data_dir)
    outcome = compare(s, restored, m, live)
    return outcome, Timings(latest, restore_s, time.monotonic() - started)
