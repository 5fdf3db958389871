#!/usr/bin/env python3
# The team's shared anchor (../shared/bench/double_entry_ceiling.py), kept here so that
# `make bench-ledger` runs its work on the stack's own database (schema `ceiling`) in the
# same run. Changed from the shared copy: VACUUM ANALYZE names its tables, pe_stats reads
# its own schema's table. Nothing else: its figures stay comparable with the shared ones.
"""Physical-limit anchor: payment events/s that PostgreSQL 15 *alone* can apply with a batched,
idempotent, double-entry ledger write, durability ON (fsync, synchronous_commit, full_page_writes).
No Kafka here: a worker gets its "Kafka batch" from memory, so the figure is an upper bound for a
consumer that applies batches.

Per batch of B events, ONE transaction:
  1. claim idempotency keys   INSERT INTO processed_events ... ON CONFLICT DO NOTHING RETURNING
  2. lock touched balances    SELECT ... FROM balances ... ORDER BY user_id, asset FOR UPDATE
  3. decide in Python         per-user order; withdrawals refused on insufficient available funds
  4. ledger                   1 transfer + 2 postings per applied event  (single-entry mode: 1 journal row)
  5. balances                 one aggregated UPDATE, one row per (user, asset)
  6. payment_events           status -> applied / refused; refused keys get outcome updated
  7. COMMIT
Workload: 70 % deposits / 30 % withdrawals, 1,000 users, 1 asset; W workers own disjoint users
(user % W == k, like Kafka partitions). Every run starts from fresh (truncated) tables, and is
checked afterwards (postings sum to 0 per transfer, balances == sum of postings == a one-by-one
Python reference, refusals == reference, counts, and a replayed batch claims nothing).
The consumer session sets jit/enable_seqscan/hashjoin/mergejoin off so that the payment_events
UPDATE probes the primary key as it does on a production-size table (--no-hints to disable;
--history N adds N old rows to payment_events instead).

Step implementations (--impl, or --steps claim=..,ledger=..,events=..):
  values : psycopg2 execute_values multi-row VALUES everywhere (transfers INSERT .. RETURNING id)
  unnest : one text array literal per column + unnest() (transfers INSERT .. RETURNING id)
  copy   : COPY into ON COMMIT DELETE ROWS temp tables + INSERT/UPDATE .. SELECT; transfer ids
           pre-allocated with nextval() so transfers and postings are COPYed straight in
  hybrid : claim/events via unnest, ledger via pre-allocated ids + COPY
  best   : claim via COPY + temp table, ledger via pre-allocated ids + COPY, events via unnest
           (fastest here; copy/hybrid/best are within a few % of each other, values is ~35 % slower)

How to run (as root; initdb's default trust auth on the unix socket):
  mkdir -p /tmp/pgceil && chown postgres:postgres /tmp/pgceil
  runuser -u postgres -- /usr/lib/postgresql/15/bin/initdb -D /tmp/pgceil/data
  runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgceil/data \\
      -o "-p 5499 -k /tmp/pgceil -c wal_level=logical -c shared_buffers=512MB -c max_wal_size=4GB" \\
      -l /tmp/pgceil/log start
  python3 -m venv /tmp/pgceil/venv && /tmp/pgceil/venv/bin/pip install psycopg2-binary
  PY=/tmp/pgceil/venv/bin/python
  $PY double_entry_ceiling.py --init                                    # create schema (once)
  $PY double_entry_ceiling.py --impl best --batch 5000 --workers 2      # one run, 200k events
  $PY double_entry_ceiling.py --summary /tmp/pgceil/results.json      # table from a results file
  $PY double_entry_ceiling.py --matrix --json /tmp/pgceil/results.json  # full matrix (~12 min)
  runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgceil/data stop
Options: --dsn (default host=/tmp/pgceil port=5499 user=postgres dbname=postgres), --events N,
--runs R, --mode double|single, --fk (add foreign keys postings->transfers/accounts), --no-hints,
--fillfactor F (payment_events), --history N, --steps (override single steps).
CPU split comes from /proc (<pid>/stat of the Python workers, their backends, and the postmaster
with all its children incl. exited ones), so run it as root on the database host.

Measured on the 2-core steering box (PG 15.18, durability on, 200k events/run):
double-entry, impl best: W=1 24.6k/32.3k/37.6k ev/s at B=500/2000/5000; W=2 51k/61k/69k;
W=3 48k/59k/63k. Single-entry W=2 B=5000: 90k. CPU/event ~26 us (Python ~4, Postgres ~22);
~1.8 KB WAL/event; CPU-bound (one fsync per batch). With FKs on postings: -40 %.
"""
import argparse
import hashlib
import io
import json
import multiprocessing as mp
import os
import random
import sys
import time
import uuid
from decimal import Decimal

import psycopg2
import psycopg2.extras

DSN = "host=/tmp/pgceil port=5499 user=postgres dbname=postgres"
USERS = 1000
ASSET = "USDT"
KINDS = ("available", "pending", "held")
PLATFORM = "__platform__"
PLATFORM_KINDS = ("omnibus", "withdrawals_payable", "fees")
CLK = os.sysconf("SC_CLK_TCK")

DDL = """
DROP TABLE IF EXISTS payment_events, processed_events, accounts, balances, transfers, postings, journal CASCADE;
CREATE TABLE payment_events (
  event_id text PRIMARY KEY, user_id text NOT NULL, asset text NOT NULL,
  amount numeric(38,18) NOT NULL, event_type text NOT NULL, status text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE processed_events (
  idempotency_key text PRIMARY KEY CHECK (length(idempotency_key) = 64),
  event_id text NOT NULL, outcome text NOT NULL, processed_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX processed_events_processed_at ON processed_events (processed_at);
CREATE TABLE accounts (id bigserial PRIMARY KEY, user_id text NOT NULL, asset text NOT NULL,
  kind text NOT NULL, UNIQUE (user_id, asset, kind));
CREATE TABLE balances (user_id text NOT NULL, asset text NOT NULL,
  available numeric(38,18) NOT NULL DEFAULT 0 CHECK (available >= 0),
  pending numeric(38,18) NOT NULL DEFAULT 0, held numeric(38,18) NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (user_id, asset));
CREATE TABLE transfers (id bigserial PRIMARY KEY, event_id text NOT NULL UNIQUE, kind text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE postings (id bigserial PRIMARY KEY, transfer_id bigint NOT NULL, account_id bigint NOT NULL,
  asset text NOT NULL, amount numeric(38,18) NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX postings_account_id ON postings (account_id);
CREATE INDEX postings_transfer_id ON postings (transfer_id);
-- single-entry comparison: one journal row per applied event
CREATE TABLE journal (id bigserial PRIMARY KEY, event_id text NOT NULL UNIQUE, user_id text NOT NULL,
  asset text NOT NULL, amount numeric(38,18) NOT NULL, kind text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX journal_user ON journal (user_id, asset);
"""
FK_ON = """
ALTER TABLE postings DROP CONSTRAINT IF EXISTS postings_transfer_fk;
ALTER TABLE postings DROP CONSTRAINT IF EXISTS postings_account_fk;
ALTER TABLE postings ADD CONSTRAINT postings_transfer_fk FOREIGN KEY (transfer_id) REFERENCES transfers(id);
ALTER TABLE postings ADD CONSTRAINT postings_account_fk FOREIGN KEY (account_id) REFERENCES accounts(id);
"""
FK_OFF = """
ALTER TABLE postings DROP CONSTRAINT IF EXISTS postings_transfer_fk;
ALTER TABLE postings DROP CONSTRAINT IF EXISTS postings_account_fk;
"""


# ---------------------------------------------------------------- helpers
def idem_key(eid, etype):
    a, b = eid.encode(), etype.encode()
    return hashlib.sha256(len(a).to_bytes(4, "big") + a + len(b).to_bytes(4, "big") + b).hexdigest()


def arr(xs):
    """text array literal; every value we pass is a bare token (hex, uuid, u0001, USDT, 12.5, 42)."""
    return "{" + ",".join(xs) + "}"


def copy_in(cur, sql, lines):
    cur.copy_expert(sql, io.StringIO("".join(lines)), size=1 << 20)


def user_of(uid):
    return int(uid[1:])


def gen_events(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        eid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        u = rng.randrange(USERS)
        if rng.random() < 0.7:
            out.append((eid, f"u{u:04d}", ASSET, Decimal(rng.randrange(1, 10**9)).scaleb(-6), "deposit"))
        else:
            out.append((eid, f"u{u:04d}", ASSET, Decimal(rng.randrange(1, 15 * 10**8)).scaleb(-6), "withdrawal"))
    return out


def proc_cpu(pid, children=False):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0.0, None
    fl = s[s.rfind(")") + 2:].split()
    ut, st, cut, cst = map(int, fl[11:15])
    return (ut + st + ((cut + cst) if children else 0)) / CLK, int(fl[1])


def pg_cpu(pm):
    """CPU seconds of the postmaster and all its children, incl. exited (reaped) ones."""
    total = proc_cpu(pm, children=True)[0]
    for d in os.listdir("/proc"):
        if d.isdigit():
            c, ppid = proc_cpu(int(d), children=True)
            if ppid == pm:
                total += c
    return total


def machine_busy():
    with open("/proc/stat") as f:
        v = list(map(int, f.readline().split()[1:9]))
    return (sum(v) - v[3] - v[4]) / CLK, sum(v) / CLK


# ---------------------------------------------------------------- step implementations
# rows: (event_id, user_id, asset, amount, event_type, key)
def claim_values(cur, rows):
    res = psycopg2.extras.execute_values(
        cur, "INSERT INTO processed_events (idempotency_key, event_id, outcome) VALUES %s "
             "ON CONFLICT DO NOTHING RETURNING idempotency_key",
        [(r[5], r[0], "applied") for r in rows], page_size=len(rows), fetch=True)
    return {x[0] for x in res}


def claim_unnest(cur, rows):
    cur.execute("INSERT INTO processed_events (idempotency_key, event_id, outcome) "
                "SELECT k, e, 'applied' FROM unnest(%s::text[], %s::text[]) u(k, e) "
                "ON CONFLICT DO NOTHING RETURNING idempotency_key",
                (arr(r[5] for r in rows), arr(r[0] for r in rows)))
    return {x[0] for x in cur.fetchall()}


def claim_copy(cur, rows):
    copy_in(cur, "COPY tmp_in (k, e) FROM STDIN", [f"{r[5]}\t{r[0]}\n" for r in rows])
    cur.execute("INSERT INTO processed_events (idempotency_key, event_id, outcome) "
                "SELECT k, e, 'applied' FROM tmp_in ON CONFLICT DO NOTHING RETURNING idempotency_key")
    return {x[0] for x in cur.fetchall()}


def lock_values(cur, pairs):
    res = psycopg2.extras.execute_values(
        cur, "SELECT b.user_id, b.asset, b.available FROM balances b JOIN (VALUES %s) v(u, a) "
             "ON b.user_id = v.u AND b.asset = v.a ORDER BY b.user_id, b.asset FOR UPDATE OF b",
        pairs, page_size=max(1, len(pairs)), fetch=True)
    return {(u, a): av for u, a, av in res}


def lock_unnest(cur, pairs):
    cur.execute("SELECT user_id, asset, available FROM balances WHERE (user_id, asset) IN "
                "(SELECT * FROM unnest(%s::text[], %s::text[])) ORDER BY user_id, asset FOR UPDATE",
                (arr(p[0] for p in pairs), arr(p[1] for p in pairs)))
    return {(u, a): av for u, a, av in cur.fetchall()}


def _legs(r, acct):
    """two postings (account_id, signed amount) for an applied event; they sum to zero."""
    ua = acct[(r[1], r[2], "available")]
    if r[4] == "deposit":
        return (ua, r[3]), (acct[(PLATFORM, r[2], "omnibus")], -r[3])
    return (ua, -r[3]), (acct[(PLATFORM, r[2], "withdrawals_payable")], r[3])


def ledger_values(cur, applied, acct):
    if not applied:
        return
    ids = psycopg2.extras.execute_values(
        cur, "INSERT INTO transfers (event_id, kind) VALUES %s RETURNING id, event_id",
        [(r[0], r[4]) for r in applied], page_size=len(applied), fetch=True)
    tid = {e: i for i, e in ids}
    post = []
    for r in applied:
        t = tid[r[0]]
        for a, amt in _legs(r, acct):
            post.append((t, a, r[2], amt))
    psycopg2.extras.execute_values(
        cur, "INSERT INTO postings (transfer_id, account_id, asset, amount) VALUES %s", post, page_size=len(post))


def ledger_unnest(cur, applied, acct):
    if not applied:
        return
    cur.execute("INSERT INTO transfers (event_id, kind) SELECT * FROM unnest(%s::text[], %s::text[]) "
                "RETURNING id, event_id", (arr(r[0] for r in applied), arr(r[4] for r in applied)))
    tid = {e: i for i, e in cur.fetchall()}
    T, A, S, M = [], [], [], []
    for r in applied:
        t = str(tid[r[0]])
        for a, amt in _legs(r, acct):
            T.append(t); A.append(str(a)); S.append(r[2]); M.append(str(amt))
    cur.execute("INSERT INTO postings (transfer_id, account_id, asset, amount) "
                "SELECT * FROM unnest(%s::bigint[], %s::bigint[], %s::text[], %s::numeric[])",
                (arr(T), arr(A), arr(S), arr(M)))


def ledger_copy(cur, applied, acct):
    if not applied:
        return
    cur.execute("SELECT nextval('transfers_id_seq') FROM generate_series(1, %s)", (len(applied),))
    ids = [x[0] for x in cur.fetchall()]
    tl, pl = [], []
    for t, r in zip(ids, applied):
        tl.append(f"{t}\t{r[0]}\t{r[4]}\n")
        (a1, m1), (a2, m2) = _legs(r, acct)
        pl.append(f"{t}\t{a1}\t{r[2]}\t{m1}\n{t}\t{a2}\t{r[2]}\t{m2}\n")
    copy_in(cur, "COPY transfers (id, event_id, kind) FROM STDIN", tl)
    copy_in(cur, "COPY postings (transfer_id, account_id, asset, amount) FROM STDIN", pl)


def journal_values(cur, applied, acct):
    if applied:
        psycopg2.extras.execute_values(
            cur, "INSERT INTO journal (event_id, user_id, asset, amount, kind) VALUES %s",
            [(r[0], r[1], r[2], r[3] if r[4] == "deposit" else -r[3], r[4]) for r in applied],
            page_size=len(applied))


def journal_unnest(cur, applied, acct):
    if applied:
        cur.execute("INSERT INTO journal (event_id, user_id, asset, amount, kind) SELECT * FROM "
                    "unnest(%s::text[], %s::text[], %s::text[], %s::numeric[], %s::text[])",
                    (arr(r[0] for r in applied), arr(r[1] for r in applied), arr(r[2] for r in applied),
                     arr(str(r[3] if r[4] == "deposit" else -r[3]) for r in applied), arr(r[4] for r in applied)))


def journal_copy(cur, applied, acct):
    if applied:
        copy_in(cur, "COPY journal (event_id, user_id, asset, amount, kind) FROM STDIN",
                [f"{r[0]}\t{r[1]}\t{r[2]}\t{r[3] if r[4] == 'deposit' else -r[3]}\t{r[4]}\n" for r in applied])


def bal_values(cur, deltas):
    psycopg2.extras.execute_values(
        cur, "UPDATE balances b SET available = b.available + v.d, updated_at = now() FROM (VALUES %s) v(u, a, d) "
             "WHERE b.user_id = v.u AND b.asset = v.a",
        [(u, a, d) for (u, a), d in sorted(deltas.items())], template="(%s, %s, %s::numeric)",
        page_size=max(1, len(deltas)))


def bal_unnest(cur, deltas):
    items = sorted(deltas.items())
    cur.execute("UPDATE balances b SET available = b.available + v.d, updated_at = now() "
                "FROM unnest(%s::text[], %s::text[], %s::numeric[]) v(u, a, d) "
                "WHERE b.user_id = v.u AND b.asset = v.a",
                (arr(k[0] for k, _ in items), arr(k[1] for k, _ in items), arr(str(d) for _, d in items)))


def _refused_keys(cur, refused):
    if refused:
        cur.execute("UPDATE processed_events SET outcome = 'refused_insufficient_funds' "
                    "WHERE idempotency_key = ANY(%s::text[])", (arr(r[5] for r in refused),))


def events_values(cur, applied, refused):
    rows = [(r[0], "applied") for r in applied] + [(r[0], "refused") for r in refused]
    if rows:
        psycopg2.extras.execute_values(
            cur, "UPDATE payment_events p SET status = v.s, updated_at = now() FROM (VALUES %s) v(e, s) "
                 "WHERE p.event_id = v.e", rows, page_size=len(rows))
    _refused_keys(cur, refused)


def events_unnest(cur, applied, refused):
    e = [r[0] for r in applied] + [r[0] for r in refused]
    if e:
        cur.execute("UPDATE payment_events p SET status = v.s, updated_at = now() "
                    "FROM unnest(%s::text[], %s::text[]) v(e, s) WHERE p.event_id = v.e",
                    (arr(e), arr(["applied"] * len(applied) + ["refused"] * len(refused))))
    _refused_keys(cur, refused)


def events_any(cur, applied, refused):
    for rows, s in ((applied, "applied"), (refused, "refused")):
        if rows:
            cur.execute("UPDATE payment_events SET status = %s, updated_at = now() WHERE event_id = ANY(%s::text[])",
                        (s, arr(r[0] for r in rows)))
    _refused_keys(cur, refused)


def events_copy(cur, applied, refused):
    lines = [f"{r[0]}\tapplied\n" for r in applied] + [f"{r[0]}\trefused\n" for r in refused]
    if lines:
        copy_in(cur, "COPY tmp_out (e, s) FROM STDIN", lines)
        cur.execute("UPDATE payment_events p SET status = o.s, updated_at = now() FROM tmp_out o WHERE p.event_id = o.e")
    _refused_keys(cur, refused)


STEP_FUNCS = {
    "claim": {"values": claim_values, "unnest": claim_unnest, "copy": claim_copy},
    "lock": {"values": lock_values, "unnest": lock_unnest},
    "ledger": {"values": ledger_values, "unnest": ledger_unnest, "copy": ledger_copy},
    "journal": {"values": journal_values, "unnest": journal_unnest, "copy": journal_copy},
    "balances": {"values": bal_values, "unnest": bal_unnest},
    "events": {"values": events_values, "unnest": events_unnest, "copy": events_copy, "any": events_any},
}
IMPLS = {
    "values": dict(claim="values", lock="values", ledger="values", journal="values", balances="values", events="values"),
    "unnest": dict(claim="unnest", lock="unnest", ledger="unnest", journal="unnest", balances="unnest", events="unnest"),
    "copy": dict(claim="copy", lock="unnest", ledger="copy", journal="copy", balances="unnest", events="copy"),
    "hybrid": dict(claim="unnest", lock="unnest", ledger="copy", journal="copy", balances="unnest", events="unnest"),
    "best": dict(claim="copy", lock="unnest", ledger="copy", journal="copy", balances="unnest", events="unnest"),
}


def resolve(impl, steps):
    spec = dict(IMPLS[impl])
    if steps:
        for kv in steps.split(","):
            k, v = kv.split("=")
            spec[k] = v
    return spec


# ---------------------------------------------------------------- the batch
class Laps:
    def __init__(self):
        self.acc = {}

    def start(self):
        self.w, self.c = time.perf_counter(), time.process_time()

    def lap(self, name):
        w, c = time.perf_counter(), time.process_time()
        a = self.acc.setdefault(name, [0.0, 0.0])
        a[0] += w - self.w
        a[1] += c - self.c
        self.w, self.c = w, c


def apply_batch(conn, cur, fn, batch, acct, laps, mode):
    laps.start()
    rows = [(e[0], e[1], e[2], e[3], e[4], idem_key(e[0], e[4])) for e in batch]
    laps.lap("prep(sha256)")
    claimed = fn["claim"](cur, rows)
    laps.lap("claim")
    new = rows if len(claimed) == len(rows) else [r for r in rows if r[5] in claimed]
    bal = fn["lock"](cur, sorted({(r[1], r[2]) for r in new})) if new else {}
    laps.lap("lock")
    applied, refused, deltas = [], [], {}
    for r in new:  # batch order == per-user order (a partition's order)
        k = (r[1], r[2])
        if r[4] == "deposit":
            bal[k] += r[3]
            deltas[k] = deltas.get(k, 0) + r[3]
            applied.append(r)
        elif bal[k] >= r[3]:
            bal[k] -= r[3]
            deltas[k] = deltas.get(k, 0) - r[3]
            applied.append(r)
        else:
            refused.append(r)
    laps.lap("decide")
    fn["ledger" if mode == "double" else "journal"](cur, applied, acct)
    laps.lap("ledger" if mode == "double" else "journal")
    if deltas:
        fn["balances"](cur, deltas)
    laps.lap("balances")
    fn["events"](cur, applied, refused)
    laps.lap("events")
    conn.commit()
    laps.lap("commit")
    return len(new), len(applied), len(refused)


TEMP_DDL = """
CREATE TEMP TABLE IF NOT EXISTS tmp_in (k text, e text) ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS tmp_out (e text, s text) ON COMMIT DELETE ROWS;
"""


def load_accounts(cur):
    cur.execute("SELECT id, user_id, asset, kind FROM accounts")
    return {(u, a, k): i for i, u, a, k in cur.fetchall()}


# A production payment_events holds millions of rows, so its per-batch UPDATE probes the primary key;
# on our 100k-row table the planner would rather seq-scan it (a hash join, ~10 us/event extra).
# These session settings give the consumer the plan it gets at production size (--no-hints: off).
# jit = off too: the disable_cost of an unavoidable seq scan (temp tables) would otherwise trigger JIT.
HINTS = "SET jit = off; SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off"


def worker(k, W, spec, B, mode, dsn, events, barrier, q, hints=True):
    mine = [e for e in events if user_of(e[1]) % W == k]
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    if hints:
        cur.execute(HINTS)
    cur.execute("SELECT pg_backend_pid()")
    bpid = cur.fetchone()[0]
    cur.execute(TEMP_DDL)
    acct = load_accounts(cur)
    conn.commit()
    fn = {s: STEP_FUNCS[s][v] for s, v in spec.items()}
    laps = Laps()
    n_new = n_app = n_ref = 0
    barrier.wait()
    b0, c0, t0 = proc_cpu(bpid)[0], os.times(), time.perf_counter()
    for i in range(0, len(mine), B):
        a, b, c = apply_batch(conn, cur, fn, mine[i:i + B], acct, laps, mode)
        n_new += a; n_app += b; n_ref += c
    t1, c1, b1 = time.perf_counter(), os.times(), proc_cpu(bpid)[0]
    q.put(dict(k=k, bpid=bpid, t0=t0, t1=t1, py_cpu=(c1.user + c1.system) - (c0.user + c0.system), be_cpu=b1 - b0,
               new=n_new, applied=n_app, refused=n_ref, laps=laps.acc, first=[list(map(str, e)) for e in mine[:B]]))
    conn.close()


# ---------------------------------------------------------------- run orchestration
def init_schema(dsn, fk=False):
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    cur.execute(DDL)
    lines = [f"u{u:04d}\t{ASSET}\t{k}\n" for u in range(USERS) for k in KINDS]
    lines += [f"{PLATFORM}\t{ASSET}\t{k}\n" for k in PLATFORM_KINDS]
    copy_in(cur, "COPY accounts (user_id, asset, kind) FROM STDIN", lines)
    cur.execute(FK_ON if fk else FK_OFF)
    conn.commit()
    conn.close()


def prepare(dsn, events, fk, fillfactor=100, history=0):
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    cur.execute("TRUNCATE payment_events, processed_events, transfers, postings, journal, balances RESTART IDENTITY")
    cur.execute(FK_ON if fk else FK_OFF)
    cur.execute(f"ALTER TABLE payment_events SET (fillfactor = {int(fillfactor)})")
    copy_in(cur, "COPY balances (user_id, asset) FROM STDIN", [f"u{u:04d}\t{ASSET}\n" for u in range(USERS)])
    if history:  # older, already-applied events: a production-size payment_events (then the planner probes the PK)
        cur.execute("INSERT INTO payment_events (event_id, user_id, asset, amount, event_type, status) "
                    "SELECT 'h' || g, 'u' || lpad((g %% 1000)::text, 4, '0'), %s, 1, 'deposit', 'applied' "
                    "FROM generate_series(1, %s) g", (ASSET, history))
    copy_in(cur, "COPY payment_events (event_id, user_id, asset, amount, event_type, status) FROM STDIN",
            [f"{e[0]}\t{e[1]}\t{e[2]}\t{e[3]}\t{e[4]}\treceived\n" for e in events])
    conn.commit()
    conn.autocommit = True
    # Its own tables only: in paystream's database (bench/ledger_bench.py runs it in a
    # schema of its own there) a database-wide VACUUM would walk the product's tables.
    cur.execute("VACUUM ANALYZE payment_events, processed_events, accounts, balances, transfers,"
                " postings, journal")
    cur.execute("SELECT pg_stat_reset_single_table_counters('payment_events'::regclass)")
    cur.execute("CHECKPOINT")
    cur.execute("SELECT pg_backend_pid()")
    pm = proc_cpu(cur.fetchone()[0])[1]
    conn.close()
    return pm


def simulate(events):
    """reference: apply the events one by one, in order, in plain Python."""
    bal, refused = {}, 0
    for e in events:
        b = bal.get(e[1], Decimal(0))
        if e[4] == "deposit":
            bal[e[1]] = b + e[3]
        elif b >= e[3]:
            bal[e[1]] = b - e[3]
        else:
            refused += 1
    return bal, refused


def verify(dsn, mode, res, spec, first_batch, events):
    """consistency of the ledger, agreement with a one-by-one reference, and idempotent replay of one
    batch (outside the timed window)."""
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    q = lambda sql: (cur.execute(sql), cur.fetchone())[1]
    ref_bal, ref_refused = simulate(events)
    assert res["new"] == len(events) and res["refused"] == ref_refused, (res, ref_refused)
    cur.execute("SELECT user_id, available FROM balances")
    db_bal = dict(cur.fetchall())
    assert all(db_bal[u] == ref_bal.get(u, 0) for u in db_bal), "balances differ from the reference"
    n_pe = q("SELECT count(*) FROM processed_events")[0]
    cur.execute("SELECT status, count(*) FROM payment_events GROUP BY 1")
    st = dict(cur.fetchall())
    assert n_pe == res["new"], (n_pe, res["new"])
    cur.execute("SELECT count(*) FROM payment_events WHERE event_id LIKE 'h%%'")
    st["applied"] = st.get("applied", 0) - cur.fetchone()[0]
    assert st.get("applied", 0) == res["applied"] and st.get("refused", 0) == res["refused"] and "received" not in st, st
    assert q("SELECT count(*) FROM processed_events WHERE outcome <> 'applied'")[0] == res["refused"]
    if mode == "double":
        assert q("SELECT count(*) FROM transfers")[0] == res["applied"]
        assert q("SELECT count(*) FROM postings")[0] == 2 * res["applied"]
        assert q("SELECT count(*) FROM (SELECT transfer_id FROM postings GROUP BY 1 HAVING sum(amount) <> 0) x")[0] == 0
        bad = q("""SELECT count(*) FROM balances b LEFT JOIN (SELECT a.user_id, a.asset, sum(p.amount) s FROM postings p
                   JOIN accounts a ON a.id = p.account_id AND a.kind = 'available' GROUP BY 1, 2) x USING (user_id, asset)
                   WHERE b.available <> coalesce(x.s, 0)""")[0]
    else:
        assert q("SELECT count(*) FROM journal")[0] == res["applied"]
        bad = q("""SELECT count(*) FROM balances b LEFT JOIN (SELECT user_id, asset, sum(amount) s FROM journal
                   GROUP BY 1, 2) x USING (user_id, asset) WHERE b.available <> coalesce(x.s, 0)""")[0]
    assert bad == 0, f"{bad} balances disagree with the ledger"
    assert q("SELECT count(*) FROM balances WHERE available < 0")[0] == 0
    # replay the first batch of worker 0: nothing may be claimed or applied again
    cur.execute(TEMP_DDL)
    acct = load_accounts(cur)
    batch = [(e[0], e[1], e[2], Decimal(e[3]), e[4]) for e in first_batch]
    before = q("SELECT sum(available)::text FROM balances")[0]
    got = apply_batch(conn, cur, {s: STEP_FUNCS[s][v] for s, v in spec.items()}, batch, acct, Laps(), mode)
    assert got == (0, 0, 0) and q("SELECT sum(available)::text FROM balances")[0] == before, got
    conn.close()
    return True


def pe_stats(dsn):
    """share of payment_events updates in this run that were HOT (no new index entry)."""
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    for _ in range(50):  # stats are flushed by the backends at exit; wait for them
        cur.execute("SELECT pg_stat_clear_snapshot(); SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                    "WHERE relname = 'payment_events' AND schemaname = current_schema()")
        u, h = cur.fetchone()
        if u:
            break
        time.sleep(0.05)
    conn.close()
    return 100.0 * h / u if u else None


def wal_stats(dsn):
    conn = psycopg2.connect(dsn)
    cur = conn.cursor()
    cur.execute("SELECT wal_records, wal_fpi, wal_bytes::bigint, wal_sync FROM pg_stat_wal")
    r = cur.fetchone()
    conn.close()
    return r


def run_one(dsn, spec, B, W, mode, n, seed, fk=False, hints=True, fillfactor=100, history=0):
    events = gen_events(n, seed)
    pm = prepare(dsn, events, fk, fillfactor, history)
    w0 = wal_stats(dsn)
    ctx = mp.get_context("fork")
    barrier, q = ctx.Barrier(W + 1), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(k, W, spec, B, mode, dsn, events, barrier, q, hints))
             for k in range(W)]
    for p in procs:
        p.start()
    barrier.wait()
    pg0, (mb0, mt0) = pg_cpu(pm), machine_busy()
    outs = [q.get() for _ in range(W)]
    for p in procs:
        p.join()
    deadline = time.time() + 10  # let the postmaster reap the backends, so their CPU sits in its cutime
    while time.time() < deadline and any(os.path.exists(f"/proc/{o['bpid']}") for o in outs):
        time.sleep(0.005)
    pg1, (mb1, mt1) = pg_cpu(pm), machine_busy()
    wall = max(o["t1"] for o in outs) - min(o["t0"] for o in outs)
    tot = {k: sum(o[k] for o in outs) for k in ("new", "applied", "refused", "py_cpu", "be_cpu")}
    laps = {}
    for o in outs:
        for name, (w, c) in o["laps"].items():
            laps.setdefault(name, [0.0, 0.0])
            laps[name][0] += w; laps[name][1] += c
    pe, w1 = pe_stats(dsn), wal_stats(dsn)
    ok = verify(dsn, mode, tot, spec, next(o["first"] for o in outs if o["k"] == 0), events)
    N = tot["new"]
    return dict(mode=mode, spec=spec, B=B, W=W, fk=fk, hints=hints, fillfactor=fillfactor, history=history,
                pe_hot_pct=pe, events=N, wal_bytes_per_event=(w1[2] - w0[2]) / N, wal_fpi_per_event=(w1[1] - w0[1]) / N,
                wal_records_per_event=(w1[0] - w0[0]) / N, wal_syncs=w1[3] - w0[3], applied=tot["applied"], refused=tot["refused"],
                wall_s=wall, ev_s=N / wall, py_cpu_s=tot["py_cpu"], backend_cpu_s=tot["be_cpu"],
                pg_all_cpu_s=pg1 - pg0, machine_busy_cores=(mb1 - mb0) / (mt1 - mt0) * os.cpu_count(),
                us_per_event=dict(py=tot["py_cpu"] / N * 1e6, backend=tot["be_cpu"] / N * 1e6,
                                  pg_all=(pg1 - pg0) / N * 1e6),
                laps_us_per_event={k: dict(wall=v[0] / N * 1e6, py=v[1] / N * 1e6) for k, v in laps.items()},
                verified=ok)


def fmt(r):
    u = r["us_per_event"]
    name = r["mode"] + ("+fk" if r["fk"] else "") + ("" if r["hints"] else "+nohints") + \
        (f"+ff{r['fillfactor']}" if r["fillfactor"] != 100 else "") + (f"+hist{r['history']}" if r["history"] else "") + \
        ":" + ",".join(f"{k}={v}" for k, v in r["spec"].items()
                                                                   if k != ("journal" if r["mode"] == "double" else "ledger"))
    return (f"{name:70s} B={r['B']:5d} W={r['W']} {r['ev_s']:8,.0f} ev/s  wall {r['wall_s']:6.2f}s  "
            f"cpu/ev: py {u['py']:5.1f}us  backend {u['backend']:5.1f}us  pg_all {u['pg_all']:5.1f}us  "
            f"busy {r['machine_busy_cores']:.2f} cores  refused {r['refused']}  pe_hot {r['pe_hot_pct'] or 0:.0f}%  "
            f"WAL {r['wal_bytes_per_event']:.0f} B/ev ({r['wal_records_per_event']:.1f} rec, {r['wal_fpi_per_event']:.2f} FPI)")


def summary(paths):
    import collections
    g = collections.OrderedDict()
    for path in paths:
        for r in json.load(open(path)):
            key = (r["mode"], r["impl"], r["fk"], r["hints"], r["fillfactor"], r["history"], r["events"], r["B"], r["W"])
            g.setdefault(key, []).append(r)
    print("mode   impl                  extras              events    B  W   events/s (runs)        mean   "
          "CPU us/ev py+pg  py%  busy cores")
    for (mode, impl, fk, hints, ff, hist, n, B, W), v in g.items():
        ev = [x["ev_s"] for x in v]
        py = sum(x["us_per_event"]["py"] for x in v) / len(v)
        pg = sum(x["us_per_event"]["pg_all"] for x in v) / len(v)
        busy = sum(x["machine_busy_cores"] for x in v) / len(v)
        extras = ",".join(e for e in ("fk" if fk else "", "" if hints else "nohints", f"ff{ff}" if ff != 100 else "",
                                       f"hist{hist // 1000}k" if hist else "") if e) or "-"
        print(f"{mode:6s} {impl:21s} {extras:18s} {n:7d} {B:5d} {W:2d}   {' / '.join(f'{e:,.0f}' for e in ev):22s} "
              f"{sum(ev) / len(ev):7,.0f}   {py:4.1f}+{pg:4.1f}    {100 * py / (py + pg):3.0f}  {busy:.2f}")
    print("\nper-step time, W=1 (us/event: wall / of which Python CPU; the rest is the backend + socket)")
    for (mode, impl, fk, hints, ff, hist, n, B, W), v in g.items():
        if W == 1:
            steps = v[0]["laps_us_per_event"].keys()
            avg = {k: (sum(x["laps_us_per_event"][k]["wall"] for x in v) / len(v),
                       sum(x["laps_us_per_event"][k]["py"] for x in v) / len(v)) for k in steps}
            print(f"{mode:6s} {impl:21s} fk={int(fk)} hints={int(hints)} ff={ff} hist={hist} n={n} B={B:5d}: " +
                  "  ".join(f"{k} {w:.1f}/{c:.1f}" for k, (w, c) in avg.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dsn", default=DSN)
    ap.add_argument("--init", action="store_true", help="(re)create the schema and accounts")
    ap.add_argument("--impl", default="best", choices=sorted(IMPLS))
    ap.add_argument("--steps", default="", help="override steps, e.g. events=any,claim=copy")
    ap.add_argument("--mode", default="double", choices=("double", "single"))
    ap.add_argument("--batch", type=int, nargs="+", default=[2000])
    ap.add_argument("--workers", type=int, nargs="+", default=[1])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--fk", action="store_true")
    ap.add_argument("--no-hints", dest="hints", action="store_false", help="no planner session settings")
    ap.add_argument("--fillfactor", type=int, default=100, help="payment_events fillfactor")
    ap.add_argument("--history", type=int, default=0, help="extra old rows in payment_events")
    ap.add_argument("--matrix", action="store_true", help="the full measurement matrix")
    ap.add_argument("--json", default="")
    ap.add_argument("--summary", nargs="+", help="print the table of one or more results files and exit")
    a = ap.parse_args()
    if a.summary:
        return summary(a.summary)
    conn = psycopg2.connect(a.dsn)
    cur = conn.cursor()
    cur.execute("SELECT current_setting('server_version'), current_setting('fsync'), "
                "current_setting('synchronous_commit'), current_setting('full_page_writes'), current_setting('wal_level')")
    ver, fs, sc, fpw, wl = cur.fetchone()
    cur.execute("SELECT to_regclass('postings') IS NOT NULL")
    have_schema = cur.fetchone()[0]
    conn.close()
    print(f"PostgreSQL {ver}: fsync={fs} synchronous_commit={sc} full_page_writes={fpw} wal_level={wl}; {os.cpu_count()} cores")
    if (fs, sc, fpw) != ("on", "on", "on"):
        sys.exit("durability must be on (fsync, synchronous_commit, full_page_writes)")
    if a.init or not have_schema:
        init_schema(a.dsn)
    base = dict(impl=a.impl, steps=a.steps, mode=a.mode, runs=a.runs, fk=a.fk, hints=a.hints,
                fillfactor=a.fillfactor, history=a.history)
    plan = []
    if a.matrix:
        M = dict(base, impl="best", steps="", mode="double", runs=2, fk=False, hints=True, fillfactor=100, history=0)
        for impl in ("values", "unnest", "copy", "hybrid", "best"):    # step-implementation variants
            plan.append(dict(M, impl=impl, B=2000, W=1))
        for W in (1, 2, 3):                                            # the main grid, best implementation
            for B in (500, 2000, 5000):
                plan.append(dict(M, B=B, W=W))
        for W in (1, 2):                                               # single-entry comparison
            for B in (500, 2000, 5000):
                plan.append(dict(M, mode="single", B=B, W=W))
        plan.append(dict(M, steps="events=any", B=2000, W=1))            # events UPDATE variant
        plan.append(dict(M, hints=False, B=2000, W=1))                  # planner's own plan, small table
        plan.append(dict(M, hints=False, history=2_000_000, B=2000, W=1, runs=1))  # production-size table
        plan.append(dict(M, fillfactor=85, B=2000, W=1))                # HOT updates of payment_events
        plan.append(dict(M, fk=True, B=2000, W=1))                      # with foreign keys
        plan.append(dict(M, fk=True, B=2000, W=2))
        plan.append(dict(M, B=5000, W=1, runs=1, events=500_000))       # longer runs, bigger tables
        plan.append(dict(M, B=5000, W=2, runs=1, events=500_000))
    else:
        for W in a.workers:
            for B in a.batch:
                plan.append(dict(base, B=B, W=W))
    results = []
    seed = 1
    for p in plan:
        for _ in range(p["runs"]):
            r = run_one(a.dsn, resolve(p["impl"], p["steps"]), p["B"], p["W"], p["mode"], p.get("events", a.events), seed,
                        fk=p["fk"], hints=p["hints"], fillfactor=p["fillfactor"], history=p["history"])
            r["impl"] = p["impl"] + (f"[{p['steps']}]" if p["steps"] else "")
            seed += 1
            results.append(r)
            print(fmt(r), flush=True)
            if p["W"] == 1:
                print("    per event (us, wall / python cpu): " + "  ".join(
                    f"{k} {v['wall']:.1f}/{v['py']:.1f}" for k, v in r["laps_us_per_event"].items()), flush=True)
            if a.json:
                with open(a.json, "w") as f:
                    json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
