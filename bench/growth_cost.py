"""Cost per event against history kept: the ingest's and the ledger's CPU per event and
the ingest's p99 at 1,000/s when the database holds 1 M, 10 M (and more) stored events
with their books, in one run on one stack of its own.

    make bench-growth-cost   (or: python bench/growth_cost.py [--sizes 1000000 10000000])

The history: applied gateway deposits over 10,000 users, each with what the pipeline
keeps of one (payment_events, event_status, processed_events, a transfer and its two
postings), ids spread over the key space as providers' are (a hash), times over the
90 days before today. The claims are filed by day (migration 0047) in the partitions
housekeeping would have made, and before each measurement housekeeping's maintenance
drops the days past its 14-day window, as its daily run keeps a stack that has run. It
is written on the server (INSERT ... SELECT, 500,000 events a transaction), topped up
from one size to the next. Before each measurement the tables are vacuumed and
analysed, and the run waits for the stack to be quiet: Debezium's walsender past the
fill's WAL (logical decoding reads all of it) and the WAL archived.

At each size the existing benchmarks run as they are (bench/cluster_cost.py's kit):
  - bench/ledger_bench.py --ab: the ledger group draining preloaded events; CPU per
    event of its Python and of Postgres, the median of its warm runs;
  - bench/ingest_bench.py --rate-only: signed deposits at 1,000/s, open loop; p99 from
    each request's scheduled send, and the CPU per accepted delivery of the ingest server
    and of Postgres (Debezium's walsender streaming the outbox included). Their event
    and trace ids are random, in the history's key space (--id-prefix).
bench/write_growth.py then tells which part of the ingest's write grows (make
bench-write-growth, on the history this bench leaves).
Its baseline is the first size, measured in the same run. Target (issue 48): at the
largest size each figure within 1.2x of the first. Ends with one line per figure,
`growth <figure>: 1M <v> 10M <v> ratio <last/first>x`.
"""

from __future__ import annotations

import argparse
import os
import re
import time

from cluster_cost import run_bench  # bench/, the script's folder

from paystream.ops.housekeeping import DEFAULT_TTL_DAYS
from paystream.schema.db import Cursor, connect, database_url, one_row
from paystream.stack import backup
from paystream.stack.postgres import superuser_sql
from paystream.stack.settings import StackSettings

HISTORY_USERS = 10_000
HISTORY_DAYS = 90  # the history's events are received over the 90 days before today
# The history's event ids: this prefix and an md5 (32 hex digits). The ingest phase's
# deliveries take ids of the same form at random, as providers' ids are, so their
# inserts land anywhere in the history's indexes, not on a few pages of their own.
HISTORY_ID_PREFIX = "growth-"
CHUNK = 500_000
TARGET_RATIO = 1.2
FIGURES = {
    "ledger_python_us": re.compile(r"cpu/event, median of \d+ warm runs \(target\): python "
                                   r"([\d,.]+) us"),
    "ledger_postgres_us": re.compile(r"cpu/event, median of \d+ warm runs \(target\): .*?"
                                     r"postgres ([\d,.]+) us"),
    "ingest_python_us": re.compile(r"cpu/delivery at \d+ req/s, median of \d+: python "
                                   r"([\d.]+) us"),
    "ingest_postgres_us": re.compile(r"cpu/delivery at \d+ req/s, median of \d+: .*postgres "
                                     r"([\d.]+) us"),
    "ingest_p99_ms": re.compile(r"p99 at \d+ req/s: ([\d.]+) ms"),
}  # and housekeeping_day_ms: one day of claims forgotten (forget_a_day)
TABLES = ("payment_events", "event_status", "processed_events", "transfers", "postings")

_USERS = """
INSERT INTO users (user_id, created_at)
SELECT 'growth-u' || lpad(u::text, 5, '0'), now() - interval '91 days'
FROM generate_series(0, %(users)s - 1) u ON CONFLICT DO NOTHING;
INSERT INTO accounts (kind, owner, asset)
SELECT 'available', 'growth-u' || lpad(u::text, 5, '0'), 'USD'
FROM generate_series(0, %(users)s - 1) u
UNION ALL SELECT 'settlement', 'growth-gw', 'USD' ON CONFLICT DO NOTHING
"""

# Events numbered [start, end) of `total`: event n's id, user, amount and time.
_PLAN = """
CREATE TEMP TABLE growth_plan ON COMMIT DROP AS
SELECT n, 'growth-' || md5(n::text) AS event_id,
       'growth-u' || lpad(mod(n * 7919, %(users)s)::text, 5, '0') AS user_id,
       round((mod(n * 7919, 100000) + 1)::numeric / 100, 2) AS amount,
       md5('growth-trace' || n) AS trace_id,
       md5(n::text) || md5((-n)::text) AS claim,
       now() - interval '1 day' - (%(total)s - n)::float8 * (interval '90 days' / %(total)s)
         AS at
FROM generate_series(%(start)s::bigint, %(end)s - 1) n
"""

_FILL = (
    "INSERT INTO payment_events (event_id, provider, event_type, user_id, asset, amount,"
    " content_hash, trace_id, payload, received_at)"
    " SELECT event_id, 'growth-gw', 'deposit', user_id, 'USD', amount, md5(event_id),"
    " trace_id, jsonb_build_object('event_id', event_id, 'event_type', 'deposit',"
    " 'user_id', user_id, 'asset', 'USD', 'amount', amount::text, 'provider', 'growth-gw'),"
    " at FROM growth_plan ORDER BY n",
    "INSERT INTO event_status (event_id, status, status_changed_at)"
    " SELECT event_id, 'applied', at + interval '80 milliseconds' FROM growth_plan ORDER BY n",
    "INSERT INTO processed_events (idempotency_key, event_id, event_type, outcome,"
    " processed_at, event_day) SELECT claim, event_id, 'deposit', 'applied',"
    " at + interval '50 milliseconds', (at AT TIME ZONE 'UTC')::date"
    " FROM growth_plan ORDER BY n",
    "WITH made AS (INSERT INTO transfers (source_event_id, event_type, created_at)"
    "  SELECT event_id, 'deposit', at + interval '50 milliseconds' FROM growth_plan"
    "  ORDER BY n RETURNING transfer_id, source_event_id)"
    " INSERT INTO postings (transfer_id, account_id, asset, amount)"
    " SELECT m.transfer_id, a.account_id, 'USD', side.amount"
    " FROM made m JOIN growth_plan p ON p.event_id = m.source_event_id"
    " CROSS JOIN LATERAL (VALUES ('available', p.user_id, p.amount),"
    "  ('settlement', 'growth-gw', -p.amount)) AS side (kind, owner, amount)"
    " JOIN accounts a ON (a.kind, a.owner, a.asset) = (side.kind, side.owner, 'USD')",
)


def held() -> int:
    with connect(database_url("owner")) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM payment_events WHERE event_id >= 'growth-'"
                    " AND event_id < 'growth.'")
        return int(one_row(cur)[0])


def prune_archive() -> int:
    """Deletes the WAL segments this stack has archived (--prune-archive, for a stack of
    the bench's own that is thrown away): at 10 M events the fill's archived WAL alone
    would fill a small disk. Returns the files deleted."""
    archive = backup.repo_path(StackSettings.from_env()) / "archive"
    gone = 0
    for segment in archive.glob("*/*/*/*"):  # <stanza>/<version-id>/<timeline+log>/<file>
        segment.unlink(missing_ok=True)
        gone += 1
    return gone


def claim_days(cur: Cursor) -> None:
    """The claims' partitions a stack that has run has: one per day of the history (the
    fill writes each claim under its event's day), none legacy (0047's, for the claims
    made before it, emptied by housekeeping long ago)."""
    cur.execute("SELECT to_regclass('processed_events_legacy')")
    if one_row(cur)[0] is None:
        return  # made by an earlier size
    cur.execute("ALTER TABLE processed_events DETACH PARTITION processed_events_legacy")
    cur.execute("DROP TABLE processed_events_legacy")
    cur.execute("SELECT processed_events_partitions(14, NULL, %s)", (HISTORY_DAYS + 1,))


def top_up(size: int, have: int, total: int, prune: bool) -> None:
    """Events numbered [have, size) of the history's `total`, CHUNK a transaction."""
    conn = connect(database_url("owner"), application_name="bench-growth-fill")
    try:
        with conn.cursor() as cur:
            cur.execute(_USERS, {"users": HISTORY_USERS})
            claim_days(cur)
            conn.commit()
            for start in range(have, size, CHUNK):
                cur.execute("SET LOCAL synchronous_commit = off")
                cur.execute(_PLAN, {"start": start, "end": min(start + CHUNK, size),
                                    "total": total, "users": HISTORY_USERS})
                for sql in _FILL:
                    cur.execute(sql)
                conn.commit()
                if prune:
                    prune_archive()
            # The history users' balances: the sum of their available postings.
            cur.execute("INSERT INTO balances (user_id, asset, balance)"
                        " SELECT a.owner, 'USD', sum(p.amount) FROM postings p"
                        " JOIN accounts a USING (account_id)"
                        " WHERE a.kind = 'available' AND a.owner LIKE 'growth-u%'"
                        " GROUP BY a.owner ON CONFLICT (user_id, asset)"
                        " DO UPDATE SET balance = EXCLUDED.balance")
            conn.commit()
        conn.autocommit = True
        with conn.cursor() as cur:
            # Housekeeping's daily run: the claims past the window go with their days.
            cur.execute("SELECT dropped FROM processed_events_partitions(14, %s)",
                        (DEFAULT_TTL_DAYS,))
            print(f"housekeeping dropped {one_row(cur)[0]} days of claims", flush=True)
            for table in TABLES:
                cur.execute(f"VACUUM (ANALYZE) {table}")
    finally:
        conn.close()
    superuser_sql(StackSettings.from_env(), "CHECKPOINT")


def quiet(timeout_s: float = 900) -> float:
    """Waits until every walsender has read past the WAL written so far and the archiver
    has the segment before the current one; the seconds waited."""
    began = time.monotonic()
    with connect(database_url("owner")) as conn, conn.cursor() as cur:
        conn.autocommit = True
        cur.execute("SELECT pg_current_wal_lsn(), pg_walfile_name(pg_current_wal_lsn())")
        lsn, segment = one_row(cur)
        while time.monotonic() - began < timeout_s:
            # The archiver's counters are read once a transaction unless cleared.
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute("SELECT coalesce(bool_and(sent_lsn >= %s::pg_lsn), true),"
                        " (SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver)"
                        " FROM pg_stat_replication", (lsn,))
            streamed, archived = one_row(cur)
            if streamed and archived >= _previous_segment(segment):
                return time.monotonic() - began
            time.sleep(2)
    raise SystemExit(f"the stack did not catch up with the fill's WAL in {timeout_s:.0f} s")


def _previous_segment(name: str) -> str:
    """The WAL file name before `name` (timeline, log, segment: 8 hex digits each; 256
    segments of 16 MB to a log)."""
    timeline, log, seg = int(name[:8], 16), int(name[8:16], 16), int(name[16:], 16)
    log, seg = (log, seg - 1) if seg else (log - 1, 255)
    return f"{timeline:08X}{log:08X}{seg:08X}"


def table_sizes() -> str:
    with connect(database_url("owner")) as conn, conn.cursor() as cur:
        # A partitioned table's size is its partitions' (a plain table has no tree).
        cur.execute("SELECT string_agg(t || ' ' || pg_size_pretty(coalesce((SELECT"
                    " sum(pg_total_relation_size(relid)) FROM pg_partition_tree(t)),"
                    " pg_total_relation_size(t))), ', ') FROM unnest(%s::text[]) t",
                    (list(TABLES),))
        return str(one_row(cur)[0])


def measure(args: argparse.Namespace) -> dict[str, float]:
    out = run_bench("ledger_bench.py", [
        "--ab", "--events", str(args.events), "--rounds", str(args.rounds),
        "--warmup-events", str(args.warmup_events)], {})
    out += run_bench("ingest_bench.py", [
        "--rate-only", "--id-prefix", HISTORY_ID_PREFIX, "--rate", str(args.rate),
        "--duration", str(args.seconds),
        "--rounds", str(args.rounds)], {})
    found = {k: float(m.group(1).replace(",", "")) for k, rx in FIGURES.items()
             if (m := rx.search(out))}
    missing = set(FIGURES) - set(found)
    if missing:
        raise SystemExit(f"no {', '.join(sorted(missing))} in the benches' output:\n"
                         f"{out[-3000:]}")
    return found


def forget_a_day() -> float:
    """Housekeeping's maintenance forgetting one more day of claims, the oldest its
    window keeps (its TTL shortened to just below that day's age), as its daily run
    does; its seconds. The day is then made again, empty, for the next size's fill."""
    with connect(database_url("owner")) as conn, conn.cursor() as cur:
        conn.autocommit = True
        cur.execute("SELECT min(substring(pg_get_expr(c.relpartbound, c.oid)"
                    "  FROM 'TO \\(''([0-9-]+)''\\)')::date) FROM pg_inherits i"
                    " JOIN pg_class c ON c.oid = i.inhrelid"
                    " WHERE i.inhparent = 'processed_events'::regclass"
                    "  AND pg_get_expr(c.relpartbound, c.oid) ~ '^FOR VALUES FROM \\(''[0-9]'")
        (oldest_end,) = one_row(cur)
        cur.execute("SELECT extract(epoch FROM now() - %s::timestamp AT TIME ZONE 'UTC')"
                    " / 86400 - 1e-6", (oldest_end,))
        (keep,) = one_row(cur)
        began = time.monotonic()
        cur.execute("SELECT dropped FROM processed_events_partitions(0, %s)", (keep,))
        took = time.monotonic() - began
        if one_row(cur)[0] != 1:
            raise SystemExit("housekeeping did not drop the oldest day of claims")
        cur.execute("SELECT processed_events_partitions(0, NULL, %s)", (HISTORY_DAYS + 1,))
    return took


def label(size: int) -> str:
    return f"{size // 1_000_000}M" if size % 1_000_000 == 0 else f"{size:,}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--events", type=int, default=20_000, help="events of each ledger run")
    ap.add_argument("--warmup-events", type=int, default=5_000)
    ap.add_argument("--rounds", type=int, default=2,
                    help="measured ledger runs and ingest phases at each size")
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--seconds", type=float, default=10, help="each ingest phase")
    ap.add_argument("--prune-archive", action="store_true",
                    help="delete the WAL the stack archives as the fill goes (a stack of "
                         "the bench's own, thrown away: make bench-growth-cost)")
    args = ap.parse_args()
    sizes = sorted(args.sizes)
    print(f"load average at the start: {os.getloadavg()[0]:.2f}", flush=True)
    figures: dict[str, dict[str, float]] = {}
    for size in sizes:
        began = time.monotonic()
        top_up(size, held(), sizes[-1], args.prune_archive)
        filled = time.monotonic() - began
        waited = quiet()
        print(f"\n{label(size)}: {held():,} stored events (filled in {filled:.0f} s, quiet "
              f"after {waited:.0f} s more); {table_sizes()}; load {os.getloadavg()[0]:.2f}",
              flush=True)
        found = measure(args)
        found["housekeeping_day_ms"] = forget_a_day() * 1000
        for key, value in found.items():
            figures.setdefault(key, {})[label(size)] = value
        print(f"{label(size)}: " + ", ".join(f"{k} {v:,.1f}" for k, v in found.items())
              + f" (load {os.getloadavg()[0]:.2f})", flush=True)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}; target: the largest size "
          f"within {TARGET_RATIO}x of the first")
    first, last = label(sizes[0]), label(sizes[-1])
    for key, values in figures.items():
        ratio = values[last] / values[first] if values[first] else float("inf")
        print(f"growth {key}: " + " ".join(f"{k} {v:.1f}" for k, v in values.items())
              + f" ratio {ratio:.2f}x" + ("" if ratio <= TARGET_RATIO else " (NOT met)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
