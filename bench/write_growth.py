"""The ingest's database write against history kept, one table size against another, in
one run: why the ingest's Postgres CPU per delivery grows with the events stored.

    python bench/write_growth.py [--copy 1000000] [--rounds 6] [--batches 1000]

Run it against a stack that holds a large history (`make bench-growth-cost` leaves one
in .stack-bench-growth; its environment: that target's BENCH_GROWTH_STACK). It copies
the first `--copy` stored events, with their statuses, into a schema of their own
(`write_growth`: payment_events and event_status with every index, constraint and the
foreign key of the real ones), then writes new events with the ingest's own write
(schema.outbox.write_events: the event, its status and its outbox message), `--per`
events a transaction as the ingest's group commit does, into the full tables and into
the copy in turns (A B A B ...), from one connection. The figure is that backend's CPU
per event (/proc), the median of the turns; the copy's is the baseline.

Ids: `--ids spread` (the default) draws each event id and trace id at random over the
history's key space, as providers' ids are, so an insert lands anywhere in the
history's indexes; `--ids narrow` numbers them in a range of their own, as
bench/ingest_bench.py's deliveries are, where every insert lands on the same few pages.
The copy is dropped at the end; the events written stay (they are the stack's own).
"""

from __future__ import annotations

import argparse
import itertools
import os
import secrets
import statistics
import time
from decimal import Decimal

from growth_cost import HISTORY_ID_PREFIX, HISTORY_USERS  # bench/, the script's folder

from paystream.schema.db import Connection, connect, database_url, one_row
from paystream.schema.event_types import EventType
from paystream.schema.events import PaymentEvent
from paystream.schema.outbox import write_events

COPY_SCHEMA = "write_growth"
TICK = os.sysconf("SC_CLK_TCK")


def backend_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def make_copy(conn: Connection, size: int) -> None:
    s = COPY_SCHEMA
    with conn.cursor() as cur:
        cur.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE; CREATE SCHEMA {s};"
                    f" CREATE TABLE {s}.payment_events"
                    "  (LIKE public.payment_events INCLUDING ALL);"
                    f" CREATE TABLE {s}.event_status (LIKE public.event_status INCLUDING ALL);"
                    f" INSERT INTO {s}.payment_events"
                    "  SELECT * FROM public.payment_events LIMIT %s;"
                    f" INSERT INTO {s}.event_status SELECT st.* FROM public.event_status st"
                    f"  JOIN {s}.payment_events USING (event_id);"
                    f" ALTER TABLE {s}.event_status ADD FOREIGN KEY (event_id)"
                    f"  REFERENCES {s}.payment_events ON DELETE CASCADE", (size,))
    conn.commit()
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f"VACUUM (ANALYZE) {s}.payment_events, {s}.event_status")
    conn.autocommit = False


def rows(conn: Connection, schema: str) -> int:
    with conn.cursor() as cur:
        # The planner's estimate: a count(*) would read a whole index of the history.
        cur.execute("SELECT reltuples::bigint FROM pg_class c JOIN pg_namespace n"
                    " ON n.oid = c.relnamespace WHERE relname = 'payment_events'"
                    " AND nspname = %s", (schema,))
        return int(one_row(cur)[0])


def turn(conn: Connection, pid: int, schema: str, batches: int, per: int, ids: str,
         numbers: itertools.count[int]) -> float:
    """Backend CPU per event (us) of `batches` transactions of `per` new events."""
    with conn.cursor() as cur:
        cur.execute(f"SET search_path = {schema}, public")
        conn.commit()
        before = backend_seconds(pid)
        for _ in range(batches):
            events = []
            for _ in range(per):
                n = next(numbers)
                if ids == "spread":
                    event_id = HISTORY_ID_PREFIX + secrets.token_hex(16)
                    trace_id = secrets.token_hex(16)
                else:
                    event_id, trace_id = f"write-growth-{n:012d}", f"msg_{n:012d}"
                events.append((PaymentEvent(event_id, EventType("deposit"),
                                            f"growth-u{n % HISTORY_USERS:05d}", "USD",
                                            Decimal("1.25"), "growth-gw"), trace_id))
            write_events(cur, events)
            conn.commit()
        return (backend_seconds(pid) - before) / (batches * per) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copy", type=int, default=1_000_000, help="events in the baseline")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--batches", type=int, default=1000, help="transactions per turn")
    ap.add_argument("--per", type=int, default=4, help="events per transaction")
    ap.add_argument("--ids", choices=("spread", "narrow"), default="spread")
    args = ap.parse_args()
    conn = connect(database_url("owner"), application_name="bench-write-growth")
    if (held := rows(conn, "public")) < 2 * args.copy:
        raise SystemExit(f"the stack holds {held:,} events, not twice the --copy: run"
                         " `make bench-growth-cost` first (it leaves its history)")
    try:
        began = time.monotonic()
        make_copy(conn, args.copy)
        print(f"copy of {args.copy:,} events made in {time.monotonic() - began:.0f} s;"
              f" load average {os.getloadavg()[0]:.2f}", flush=True)
        sizes = {"public": rows(conn, "public"), COPY_SCHEMA: rows(conn, COPY_SCHEMA)}
        with conn.cursor() as cur:
            cur.execute("SELECT pg_backend_pid()")
            pid = int(one_row(cur)[0])
        numbers = itertools.count(int(time.time() * 1000) * 1000)
        cpu: dict[str, list[float]] = {s: [] for s in sizes}
        for r in range(args.rounds):
            for schema in sizes:
                cpu[schema].append(turn(conn, pid, schema, args.batches, args.per,
                                        args.ids, numbers))
            print(f"round {r + 1}: " + ", ".join(
                f"{sizes[s]:,} events {cpu[s][-1]:.1f} us" for s in sizes), flush=True)
        history, baseline = (statistics.median(cpu[s]) for s in ("public", COPY_SCHEMA))
        print(f"write cpu/event ({args.ids} ids, {args.per} a transaction), median of"
              f" {args.rounds}: {sizes['public']:,} events {history:.1f} us,"
              f" baseline {sizes[COPY_SCHEMA]:,} events {baseline:.1f} us,"
              f" ratio {history / baseline:.2f}x; load average {os.getloadavg()[0]:.2f}")
    finally:
        conn.rollback()
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {COPY_SCHEMA} CASCADE")
        conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
