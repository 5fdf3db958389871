"""Cost against history kept: housekeeping's time to forget one day of
notification attempts when the database holds 1 M, 10 M and 30 M of them, by partition
(migration 0039's daily partitions, dropped by housekeeping's function) and, as the
baseline, by rows (the same day deleted in batches of 1,000 from an unpartitioned twin,
one short transaction each, as housekeeping deleted before 0039).

    make bench-growth   (or: python bench/growth_bench.py [--sizes 1000000 10000000 30000000])

Runs on a scratch database of the stack's Postgres (created at the newest schema,
dropped afterwards), so the stack's data is left alone. The history is `--days` (30, the
TTL) days of attempts, the same number each day, so a day is 1/30 of the table: the
case the partitions are for (traffic grows, the TTL stays). Each size is reached by
topping up (INSERT ... SELECT on the server, the fastest fill: no client round trips);
after each measurement the forgotten day is written again, so the next size starts from
a full history. Prints one line per figure and size, and last
`growth <figure>: 1M <v> 10M <v> 30M <v> ratio <30M/1M>x`.

`--figures processed_events_by_partition processed_events_by_rows` measures the same for
the ledger's idempotency claims: a day's partition dropped by housekeeping's function
(migration 0047), against the real purge_final's batches on the legacy table, detached
from the partitions so that it stands as the table was before 0047.

Not measured here yet: ingest and ledger CPU per event and the
ingest's p99 at 1,000/s against the stored events' count.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

from bench import results
from paystream.ops.housekeeping import purge_processed_events
from paystream.schema.db import Connection, PostgresAddress, connect
from paystream.schema.migrate import apply_pending
from paystream.stack.postgres import superuser_sql
from paystream.stack.settings import StackSettings

DELIVERIES = 1_000  # attempts are spread over this many deliveries (the foreign key)
BATCH = 1_000  # housekeeping's default --batch-size


@contextmanager
def scratch_database() -> Iterator[PostgresAddress]:
    settings = StackSettings.from_env()
    name = f"paystream_growth_{os.getpid()}"
    superuser_sql(settings, f'CREATE DATABASE "{name}" OWNER paystream')
    try:
        yield replace(PostgresAddress.direct_from_env(), db=name)
    finally:
        superuser_sql(settings, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _day(today: date, age: int) -> date:
    return today - timedelta(days=age)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), UTC)


def prepare(conn: Connection, days: int, today: date) -> None:
    """The newest schema; `days` past daily partitions in place of the legacy one; the
    deliveries the attempts belong to; the unpartitioned twin of the table as it was
    (0011's indexes, and one on recorded_at: the cheapest batch a row purge could pick)."""
    assert apply_pending(conn)
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute("DROP TABLE notification_attempts_legacy")
        for age in range(days, 0, -1):
            day = _day(today, age)
            cur.execute(f"CREATE TABLE notification_attempts_{day:%Y%m%d} PARTITION OF"
                        " notification_attempts FOR VALUES FROM (%s) TO (%s)",
                        (_midnight(day), _midnight(day + timedelta(days=1))))
        cur.execute("INSERT INTO notification_endpoints (endpoint_id, url, secret)"
                    " VALUES ('ep_' || repeat('b', 24), 'http://bench.test/', "
                    " decode(repeat('00', 32), 'hex'))")
        cur.execute("INSERT INTO notification_intents (intent_id, type, user_id, created_at,"
                    " data) SELECT 'ntf_' || md5(n::text), 'deposit.credited', 'u', now(),"
                    " '{}' FROM generate_series(1, %s) n", (DELIVERIES,))
        cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id, state)"
                    " SELECT intent_id, 'ep_' || repeat('b', 24), 'delivered'"
                    " FROM notification_intents")
        cur.execute("CREATE TABLE attempts_flat (LIKE notification_attempts INCLUDING DEFAULTS,"
                    " PRIMARY KEY (id))")
        cur.execute("CREATE INDEX ON attempts_flat (intent_id, endpoint_id)")
        cur.execute("CREATE INDEX ON attempts_flat (recorded_at)")
        # Today and the days ahead exist already, as in production: the measured runs
        # only drop.
        cur.execute("SELECT notification_attempts_partitions(14, NULL)")
        # The claims: the legacy table stands alone (the baseline purges it by rows); the
        # past days get the partitions earlier runs of housekeeping would have made.
        cur.execute("ALTER TABLE processed_events DETACH PARTITION processed_events_legacy")
        cur.execute("SELECT processed_events_partitions(0, NULL, %s)", (days,))
    conn.commit()


# A day's rows of each table, `n` numbering them, `r` their time within the day's first
# 23 hours (a cutoff in the last hour takes exactly that day, whatever the clocks' skew).
_ROWS = {
    "attempts": ("INSERT INTO {table} (intent_id, endpoint_id, attempt, started_at, latency_s,"
                 " status_code, recorded_at) SELECT 'ntf_' || md5((n %% %(deliveries)s + 1)"
                 "::text), 'ep_' || repeat('b', 24), 1, r, 0.05, 200, r"),
    # As the ledger claims them: a 64-hex key per event, a final outcome, its day.
    "processed_events": ("INSERT INTO {table} (idempotency_key, event_id, event_type, outcome,"
                         " processed_at, event_day) SELECT md5(n::text) || md5((-n)::text),"
                         " 'evt_growth_' || n, 'deposit', 'applied', r,"
                         " (r AT TIME ZONE 'UTC')::date"),
}


def fill(conn: Connection, table: str, rows_per_day: int, ages: range, today: date,
         start: int) -> None:
    """`rows_per_day` more rows on each day of `ages`, spread over its first 23 hours."""
    kind = "processed_events" if table.startswith("processed_events") else "attempts"
    with conn.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
        for age in ages:
            cur.execute(
                _ROWS[kind].format(table=table)
                + " FROM generate_series(%(start)s, %(end)s - 1) n,"
                " LATERAL (SELECT %(day)s::timestamptz"
                "  + make_interval(secs => (n - %(start)s) * 82800.0 / %(count)s)) t(r)",
                {"deliveries": DELIVERIES, "start": start, "end": start + rows_per_day,
                 "count": rows_per_day, "day": _midnight(_day(today, age))})
            conn.commit()
            start += rows_per_day


def _drop_oldest(conn: Connection, today: date, days: int, function: str
                 ) -> tuple[float, int]:
    """Housekeeping's maintenance `function` forgetting the oldest day (keep_days chosen
    so only it expires); its seconds and the partitions dropped. The connection is left
    in autocommit for the caller to make the day's partition again."""
    oldest_end = _midnight(_day(today, days) + timedelta(days=1))
    keep = (datetime.now(UTC) - oldest_end).total_seconds() / 86400 - 1 / 86400
    conn.autocommit = True
    with conn.cursor() as cur:
        began = time.monotonic()
        cur.execute(f"SELECT dropped FROM {function}(0, %s)", (keep,))
        return time.monotonic() - began, int(cur.fetchone()[0])


def by_partition(conn: Connection, today: date, days: int) -> tuple[float, int]:
    """A day of notification attempts forgotten by its partition, then made again."""
    took, dropped = _drop_oldest(conn, today, days, "notification_attempts_partitions")
    day = _day(today, days)
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE notification_attempts_{day:%Y%m%d} PARTITION OF"
                    " notification_attempts FOR VALUES FROM (%s) TO (%s)",
                    (_midnight(day), _midnight(day + timedelta(days=1))))
    conn.autocommit = False
    return took, dropped


def by_claim_partition(conn: Connection, today: date, days: int) -> tuple[float, int]:
    """A day of claims forgotten by its partition, then made again (the function makes
    the days it is asked for that no partition covers)."""
    took, dropped = _drop_oldest(conn, today, days, "processed_events_partitions")
    with conn.cursor() as cur:
        cur.execute("SELECT processed_events_partitions(0, NULL, %s)", (days,))
    conn.autocommit = False
    return took, dropped


def by_rows(conn: Connection, today: date, days: int) -> tuple[float, int]:
    """The same day deleted from the unpartitioned twin, BATCH rows per transaction."""
    cutoff = _midnight(_day(today, days) + timedelta(days=1))
    conn.autocommit = True
    deleted = 0
    with conn.cursor() as cur:
        began = time.monotonic()
        while True:
            cur.execute("DELETE FROM attempts_flat WHERE id IN (SELECT id FROM attempts_flat"
                        " WHERE recorded_at < %s ORDER BY recorded_at LIMIT %s)",
                        (cutoff, BATCH))
            deleted += cur.rowcount
            if cur.rowcount < BATCH:
                break
        took = time.monotonic() - began
    conn.autocommit = False
    return took, deleted


def by_processed_rows(conn: Connection, today: date, days: int) -> tuple[float, int]:
    """Housekeeping's processed_events purge (the real one, batches of BATCH, on the
    legacy table: its rows are the ones it purges) with its TTL set so only the oldest
    day is older."""
    oldest_end = _midnight(_day(today, days) + timedelta(days=1))
    ttl = (datetime.now(UTC) - oldest_end).total_seconds() / 86400 + 1 / 48
    conn.autocommit = True
    began = time.monotonic()
    done = purge_processed_events(conn, ttl_days=ttl, batch_size=BATCH)
    took = time.monotonic() - began
    conn.autocommit = False
    return took, done.deleted


# figure -> (the tables it needs filled, how one day is forgotten)
MEASURES: dict[str, tuple[tuple[str, ...], Callable[[Connection, date, int],
                                                    tuple[float, int]]]] = {
    "attempts_by_partition": (("notification_attempts",), by_partition),
    "attempts_by_rows": (("attempts_flat",), by_rows),
    "processed_events_by_partition": (("processed_events",), by_claim_partition),
    "processed_events_by_rows": (("processed_events_legacy",), by_processed_rows),
}


def label(size: int) -> str:
    return f"{size // 1_000_000}M" if size % 1_000_000 == 0 else f"{size:,}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000,
                                                              30_000_000])
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--figures", nargs="+", choices=list(MEASURES),
                    default=["attempts_by_partition", "attempts_by_rows"])
    ap.add_argument("--results", metavar="FILE", help="also write the figures as JSON")
    args = ap.parse_args()
    # Stopped with SIGTERM, it still drops its scratch database (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    print("load average before: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    today = datetime.now(UTC).date()
    tables = sorted({t for f in args.figures for t in MEASURES[f][0]})
    figures: dict[str, dict[str, float]] = {f"retention_day_{f}_s": {} for f in args.figures}
    with scratch_database() as address, closing(connect(address.dsn("owner"))) as conn:
        prepare(conn, args.days, today)
        held = 0
        for size in sorted(args.sizes):
            per_day = (size - held) // args.days
            began = time.monotonic()
            for table in tables:
                fill(conn, table, per_day, range(args.days, 0, -1), today, held)
            held += per_day * args.days
            conn.autocommit = True
            with conn.cursor() as cur:
                for table in tables:
                    cur.execute(f"VACUUM (ANALYZE) {table}")
            conn.autocommit = False
            print(f"{label(size)}: {held:,} rows in each of {', '.join(tables)}, filled in"
                  f" {time.monotonic() - began:.0f} s", flush=True)
            day_rows = held // args.days
            for figure in args.figures:
                # A drop is tens of ms, so its noise is the machine's: the median of 3.
                tries = []
                for n in range(3 if figure.endswith("by_partition") else 1):
                    took, gone = MEASURES[figure][1](conn, today, args.days)
                    assert gone in (1, day_rows), (figure, gone, day_rows)  # 1: a partition
                    tries.append(took)
                    for table in MEASURES[figure][0]:
                        # The day forgotten, written again: the history stays full.
                        fill(conn, table, day_rows, range(args.days, args.days - 1, -1),
                             today, 10**12 + held * 4 + n * day_rows)
                figures[f"retention_day_{figure}_s"][label(size)] = statistics.median(tries)
                print(f"{label(size)}: one day ({day_rows:,} rows) forgotten, {figure}:"
                      f" {' '.join(f'{t:.3f}' for t in tries)} s", flush=True)
    print("load average after: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    labels = [label(s) for s in sorted(args.sizes)]
    for figure, values in figures.items():
        line = " ".join(f"{k} {values[k]:.3f}" for k in labels)
        ratio = values[labels[-1]] / values[labels[0]] if values[labels[0]] else float("inf")
        print(f"growth {figure}: {line} ratio {ratio:.2f}x")
    results.write(args.results, "growth", "retention by rows (unpartitioned twin)", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
