"""Statements and exports at month-end scale: a 1,000,000-line statement imported and
matched against books holding the same events, and 10 M postings exported to Parquet
beside a plain `COPY ... TO` of the same rows, in the same run.

1. Fill: `--lines` gateway deposits in payment_events (one INSERT ... SELECT
   generate_series on the server, the bench's own asset), received a second apart.
2. A statement of them: one payment line per event (its reference, its contract fee),
   a payout per 1,000 lines; written to a temporary file (not timed).
3. `paystream statements import --provider payments FILE`, a child process: wall time
   and its peak RSS (the Python side; Postgres' memory is its own). Every line must
   come out matched.
4. Fill: `--postings` postings (two per transfer, between two platform accounts of the
   bench's asset), created in January 2001 (no other row is).
5. Baseline: `COPY (the export's query) TO STDOUT` read and dropped (cold, then warm
   again after the Parquet export); `paystream export postings --format parquet`, then
   `--format csv`, child processes: wall time, peak RSS, file size.
6. Everything the bench wrote is deleted (`--keep` leaves it).

Run with `make bench-statements` (the stack must be up; it uses the stack's database).
On a 2-core machine the 10 M fill takes minutes: `--postings` makes it smaller.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import tempfile
import time
import uuid
from decimal import Decimal
from pathlib import Path

from paystream.launch import paystream_argv
from paystream.schema.db import connect, database_url
from paystream.statements.export import SHAPES
from paystream.statements.reads import counts

FROM, TO = "2001-01-01T00:00:00Z", "2001-02-01T00:00:00Z"
PAYOUT_EVERY = 1000
FEE_PERCENT, FEE_FIXED = Decimal("2.9"), Decimal("0.30")


def sql(query: str, params: object = None) -> list[tuple[object, ...]]:
    conn = connect(database_url("owner"), application_name="paystream-bench-statements")
    try:
        with conn, conn.cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def fill_events(asset: str, lines: int) -> float:
    started = time.monotonic()
    sql("INSERT INTO payment_events (event_id, provider, event_type, user_id, asset, amount,"
        " content_hash, trace_id, payload, received_at)"
        " SELECT 'bench-stmt-' || %(asset)s || '-' || g, 'payments', 'deposit', 'bench-stmt',"
        " %(asset)s, (g %% 997 + 1) + 0.25, md5(g::text), 'bench', '{}'::jsonb,"
        " timestamptz '2026-11-01' + g * interval '1 second'"
        " FROM generate_series(1, %(n)s) g", {"asset": asset, "n": lines})
    return time.monotonic() - started


def write_statement(path: Path, asset: str, lines: int) -> None:
    """One payment line per filled event, a payout closing every PAYOUT_EVERY lines."""
    base = 1_793_491_200  # 2026-11-01T00:00:00Z
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["id", "type", "amount", "fee", "net", "currency", "created",
                      "available_on", "payout_id", "reference", "customer"])
        settled = Decimal(0)
        for g in range(1, lines + 1):
            amount = Decimal(g % 997 + 1) + Decimal("0.25")
            fee = amount * FEE_PERCENT / 100 + FEE_FIXED
            payout = f"po_{asset}_{(g - 1) // PAYOUT_EVERY}"
            created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + g))
            out.writerow([f"txn_{asset}_{g}", "payment", amount, fee, amount - fee, asset,
                          created, "", payout, f"bench-stmt-{asset}-{g}", f"c{g}"])
            settled += amount - fee
            if g % PAYOUT_EVERY == 0 or g == lines:
                out.writerow([payout, "payout", -settled, "0", -settled, asset, created, "",
                              payout, "", ""])
                settled = Decimal(0)


def result_counts(statement_id: int) -> dict[str, int]:
    conn = connect(database_url("owner"), application_name="paystream-bench-statements")
    try:
        with conn, conn.cursor() as cur:
            return counts(cur, statement_id)
    finally:
        conn.close()


def run_child(*args: str) -> tuple[float, float, str]:
    """(seconds, peak RSS in MiB, output) of a paystream command."""
    started = time.monotonic()
    child = subprocess.Popen(paystream_argv(*args), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
    assert child.stdout is not None
    output = child.stdout.read().decode()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    if child.returncode != 0:
        raise SystemExit(f"paystream {' '.join(args)} failed ({child.returncode}):\n{output}")
    return seconds, usage.ru_maxrss / 1024, output


def fill_postings(asset: str, postings: int) -> float:
    started = time.monotonic()
    sql("INSERT INTO accounts (kind, owner, asset) VALUES ('opening', 'platform', %s),"
        " ('adjustments', 'platform', %s) ON CONFLICT DO NOTHING", (asset, asset))
    sql("WITH t AS (INSERT INTO transfers (source_event_id, event_type, created_at)"
        " SELECT 'bench-post-' || %(asset)s || '-' || g, 'adjustment_credit',"
        " timestamptz '2001-01-01' + g * interval '1 millisecond'"
        " FROM generate_series(1, %(n)s) g RETURNING transfer_id),"
        " a AS (SELECT (SELECT account_id FROM accounts WHERE kind = 'opening'"
        "  AND owner = 'platform' AND asset = %(asset)s) AS o,"
        " (SELECT account_id FROM accounts WHERE kind = 'adjustments' AND owner = 'platform'"
        "  AND asset = %(asset)s) AS j)"
        " INSERT INTO postings (transfer_id, account_id, asset, amount)"
        " SELECT t.transfer_id, x.account_id, %(asset)s, x.amount FROM t, a,"
        " LATERAL (VALUES (a.o, (t.transfer_id %% 1000 + 1) * 1.5),"
        "                 (a.j, -(t.transfer_id %% 1000 + 1) * 1.5)) AS x(account_id, amount)",
        {"asset": asset, "n": postings // 2})
    return time.monotonic() - started


def copy_baseline() -> tuple[float, int]:
    """A plain COPY of the export's rows to nowhere: (seconds, bytes)."""
    conn = connect(database_url("ops"), application_name="paystream-bench-statements")
    sink = _Count()
    try:
        conn.set_session(isolation_level="REPEATABLE READ", readonly=True)
        with conn.cursor() as cur:
            query = cur.mogrify(SHAPES["postings"].query, {"start": FROM, "end": TO}).decode()
            started = time.monotonic()
            cur.copy_expert(f"COPY ({query}) TO STDOUT (FORMAT csv)", sink, size=1 << 20)
            return time.monotonic() - started, sink.bytes
    finally:
        conn.close()


class _Count:
    bytes = 0

    def write(self, data: bytes) -> int:
        self.bytes += len(data)
        return len(data)


def clean(asset: str) -> None:
    sql("DELETE FROM postings WHERE asset = %s", (asset,))
    sql("DELETE FROM transfers WHERE source_event_id LIKE %s", (f"bench-post-{asset}-%",))
    sql("DELETE FROM accounts WHERE asset = %s", (asset,))
    sql("DELETE FROM statement_matches WHERE statement_id IN (SELECT statement_id FROM"
        " statements WHERE file_name = %s)", (f"{asset}.csv",))
    sql("DELETE FROM statement_lines WHERE statement_id IN (SELECT statement_id FROM"
        " statements WHERE file_name = %s)", (f"{asset}.csv",))
    sql("DELETE FROM statements WHERE file_name = %s", (f"{asset}.csv",))
    sql("DELETE FROM payment_events WHERE asset = %s", (asset,))


def statements_part(asset: str, lines: int, folder: Path) -> None:
    fill_s = fill_events(asset, lines)
    path = folder / f"{asset}.csv"
    write_statement(path, asset, lines)
    size = path.stat().st_size / 2**20
    seconds, rss, output = run_child("statements", "import", "--provider", "payments",
                                     str(path))
    (statement_id,) = sql("SELECT statement_id FROM statements WHERE file_name = %s",
                          (path.name,))[0]
    counts = {r: n for r, n in result_counts(int(statement_id)).items() if n}
    phases = re.search(r"\(import ([0-9.]+) s, match ([0-9.]+) s\)", output)
    print(f"fill: {lines:,} events in {fill_s:.1f} s; statement {size:.0f} MiB,"
          f" {lines:,} payments + {len(range(0, lines, PAYOUT_EVERY)):,} payouts")
    print(f"import + match: {seconds:.1f} s (import {phases[1] if phases else '?'} s,"
          f" match {phases[2] if phases else '?'} s), peak RSS {rss:.0f} MiB"
          f" (target <= 60 s, <= 300 MiB); results {counts}; load average"
          f" {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    assert set(counts) == {"matched"}, output


def export_part(asset: str, postings: int, folder: Path) -> None:
    fill_s = fill_postings(asset, postings)
    sql("ANALYZE transfers; ANALYZE postings")
    print(f"fill: {postings:,} postings in {fill_s:.1f} s")
    base_s, base_bytes = copy_baseline()  # also warms the cache for what follows
    print(f"baseline COPY ... TO STDOUT (csv, dropped), cold: {base_s:.1f} s, "
          f"{base_bytes / 2**20:.0f} MiB")
    out = folder / "postings.parquet"
    seconds, rss, _ = run_child("export", "postings", "--from", FROM, "--to", TO,
                                "--format", "parquet", "--output", str(out))
    print(f"export postings parquet: {seconds:.1f} s, peak RSS {rss:.0f} MiB, "
          f"{out.stat().st_size / 2**20:.0f} MiB (target <= 60 s, <= 300 MiB); load average"
          f" {os.getloadavg()[0]:.1f}")
    base_s, _ = copy_baseline()
    print(f"baseline COPY ... TO STDOUT (csv, dropped), warm: {base_s:.1f} s")
    seconds, rss, _ = run_child("export", "postings", "--from", FROM, "--to", TO,
                                "--format", "csv", "--output", str(folder / "postings.csv"))
    print(f"export postings csv: {seconds:.1f} s, peak RSS {rss:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="statement lines")
    parser.add_argument("--postings", type=int, default=10_000_000,
                        help="postings to export (0: skip the export part)")
    parser.add_argument("--keep", action="store_true", help="leave the bench's rows")
    args = parser.parse_args()
    asset = "BENCH" + uuid.uuid4().hex[:6].upper()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-statements-") as folder:
            if args.lines:
                statements_part(asset, args.lines, Path(folder))
            if args.postings:
                export_part(asset, args.postings, Path(folder))
    finally:
        if not args.keep:
            clean(asset)


if __name__ == "__main__":
    main()
