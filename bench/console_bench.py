"""Operator console benchmark: each page's p50/p99 through the real console on a database
of 1,000,000 payment events, against the same page's SQL run bare, in the same run.

    make bench-console   (or: PYTHONPATH=. .venv/bin/python bench/console_bench.py
                          [--requests 300] [--events 1000000] [--drop])

Target (the console's issue): every page answers in <= 100 ms p99 on 1 M events.

1. Fill. payment_events is topped up to --events rows (at least MIN_OWN of the bench's
   own) with rows of the bench's own, all ids prefixed `bench-console-`, in ONE
   transaction of INSERT ... SELECT generate_series as the owner (so a fill is there
   whole or not at all, and a later run that finds it skips it): 10,000 users and one
   heavy user with every 17th event; the ledger's processed_events row of every event
   it decided; a transfer with its two postings (user's available account against a
   gateway's settlement account, or a chain deposit's custody account) and a
   `deposit.credited`/`deposit.finalized` intent for 40 % of them; a final chain
   deposit (network `bench-console`, a deposit address per user) for 10 %; one dead
   letter per 50 events (20,000 at 1 M: 70 % open, 20 % replayed, 10 % discarded, five
   reasons), and delivered notifications of the heavy user's intents to a disabled
   endpoint of the bench's own. Balances are the postings' sums.
   What it leaves on the stack (docs/benchmarks.md): nothing on Kafka, no outbox row,
   and every user it names created first. Its books reconcile (every transfer sums to
   zero, balances equal their accounts, custody of `bench-console` equals its final
   deposits); no event is `received` (nothing looks stuck), no deposit unsettled (no
   watcher looks at them), every dead letter older than an hour (the health check's
   window), every notification delivered. Its dead letters cannot be replayed: their
   events' stored content hash is not the wire's (a replay refuses them as altered), so
   not even a bulk replay sends a bench event anywhere. `--drop` deletes all of it.
2. The console: `paystream console` on a free port (the real server, as `paystream run`
   starts it), a key made by `paystream console keys create --name bench` (revoked at
   the end), one login through the form (requests).
3. Each page, N sequential requests after a warm-up, each followed by the same page's
   SQL bare: the statements the page's own code sends (captured once by running the
   route's code on a recording cursor, in the console's own transaction framing),
   replayed with the same parameters on one connection as paystream_ops, rows fetched,
   no HTTP and no rendering. Both include the session check every request makes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar

import psycopg2.extensions
import requests
from starlette.requests import Request

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from paystream.console import routes_search  # noqa: E402
from paystream.console.app import templates  # noqa: E402
from paystream.console_kit import access  # noqa: E402
from paystream.console_kit.database import ConsoleDatabase  # noqa: E402
from paystream.console_kit.settings import ConsoleSettings  # noqa: E402
from paystream.console_kit.web import SESSION_COOKIE  # noqa: E402
from paystream.consumers.dead_letters import console_routes as routes_dead_letters  # noqa: E402
from paystream.launch import free_port, paystream_argv  # noqa: E402
from paystream.schema.db import (  # noqa: E402
    Connection,
    Cursor,
    connect,
    database_url,
    one_row,
    where,
)
from tests.support.console import ConsoleServer, make_key  # noqa: E402

T = TypeVar("T")
TARGET_P99_MS = 100.0
PREFIX = "bench-console-"
# Byte-ordered bounds of the prefix (`-` is 0x2d, `.` 0x2e): an index range, not a LIKE
# the planner cannot use under a non-C collation.
LOW, HIGH = PREFIX, PREFIX[:-1] + "."
EVENTS_LOW, EVENTS_HIGH = PREFIX + "e", PREFIX + "f"
HEAVY_USER = PREFIX + "heavy"
NO_DLQ = PREFIX + "gw-c"  # a gateway none of whose events was dead-lettered
MANY_DLQ = PREFIX + "gw-a"  # one with half of the dead letters (8,000 events dead-lettered)
NETWORK = "bench-console"
DLQ_TOPIC = "bench-console.payments"
ENDPOINT = "ep_" + "bc" * 12
MIN_OWN = 100_000  # events of its own even on a stack holding a million already
USERS = 10_000
WARM_UP = 20


# -- 1. the fill ---------------------------------------------------------------------------

# One row per bench event: what each table gets is derived from it. `kind`: dead (every
# 50th), rejected (a withdrawal refused for funds), chain (a final chain deposit) or
# gateway (a gateway's deposit); 40 % of the events (every chain deposit, 30 % of the
# gateway ones) were posted as transfers.
_PLAN = """
CREATE TEMP TABLE bench_plan ON COMMIT DROP AS
SELECT *, jsonb_strip_nulls(jsonb_build_object(
         'event_id', event_id, 'event_type', event_type, 'user_id', user_id, 'asset', asset,
         'amount', amount::text, 'provider', provider,
         'occurred_at', to_char(received_at AT TIME ZONE 'UTC',
                                'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
         'chain', CASE WHEN tx_hash IS NOT NULL THEN jsonb_build_object(
           'network', 'bench-console', 'tx_hash', tx_hash, 'log_index', 0,
           'block_number', i, 'recipient', recipient) END)) AS payload
FROM (
SELECT i, event_id, user_id, kind, transfer, dlq_status, reason, provider, event_type,
       asset, amount, received_at,
       CASE WHEN kind = 'dead' AND dlq_status <> 'replayed' THEN 'dead_lettered'
            WHEN kind = 'rejected' THEN 'rejected' ELSE 'applied' END AS status,
       CASE WHEN kind = 'chain' THEN '0x' || encode(sha256(convert_to(
            'bench-console-tx' || i, 'UTF8')), 'hex') END AS tx_hash,
       '0x' || left(encode(sha256(convert_to(user_id, 'UTF8')), 'hex'), 40) AS recipient
FROM (
  SELECT i, 'bench-console-e' || lpad(i::text, 7, '0') AS event_id,
         CASE WHEN mod(i, 17) = 0 THEN 'bench-console-heavy'
              ELSE 'bench-console-u' || lpad(mod(i * 7919, %(users)s)::text, 5, '0')
         END AS user_id,
         kind, kind = 'chain' OR (kind = 'gateway' AND mod(i, 10) IN (0, 1, 2)) AS transfer,
         CASE WHEN kind <> 'dead' THEN NULL WHEN mod(i / 50, 10) < 7 THEN 'open'
              WHEN mod(i / 50, 10) < 9 THEN 'replayed' ELSE 'discarded' END AS dlq_status,
         CASE WHEN mod(i / 500, 20) < 9 THEN 'handler_error'
              WHEN mod(i / 500, 20) < 14 THEN 'invalid_amount'
              WHEN mod(i / 500, 20) < 17 THEN 'malformed'
              WHEN mod(i / 500, 20) < 19 THEN 'header_mismatch'
              ELSE 'db_rejected_23514' END AS reason,
         CASE WHEN kind = 'chain' THEN 'bench-console-chain'
              WHEN mod(i / 10, 10) < 6 THEN 'bench-console-gw-a'
              WHEN mod(i / 10, 10) < 9 THEN 'bench-console-gw-b'
              ELSE 'bench-console-gw-c' END AS provider,
         CASE WHEN kind = 'rejected' THEN 'withdrawal' ELSE 'deposit' END AS event_type,
         CASE WHEN kind = 'chain' THEN 'USDC'
              ELSE (ARRAY['USD', 'EUR', 'USDC'])[mod(i / 7, 3) + 1] END AS asset,
         round((mod(i * 7919, 100000) + 1)::numeric / 100, 2) AS amount,
         -- 90 days of history, ending two hours ago (older than the health check's hour)
         now() - interval '2 hours' - (%(n)s - i)::float8 * (interval '90 days' / %(n)s)
           AS received_at
  FROM (SELECT i, CASE WHEN mod(i, 50) = 25 THEN 'dead' WHEN mod(i, 10) = 7 THEN 'rejected'
                       WHEN mod(i, 10) = 3 THEN 'chain' ELSE 'gateway' END AS kind
        FROM generate_series(1::bigint, %(n)s) AS i) AS g
) AS planned
) AS described
"""

_KEY = ("encode(sha256(int8send(octet_length({e})::bigint) || convert_to({e}, 'UTF8')"
        " || int8send(octet_length({t})::bigint) || convert_to({t}, 'UTF8')), 'hex')")
_INTENT_TYPE = "CASE WHEN kind = 'chain' THEN 'deposit.finalized' ELSE 'deposit.credited' END"

_FILL = [
    ("users",
     "INSERT INTO users (user_id, created_at) SELECT user_id, min(received_at)"
     " FROM bench_plan GROUP BY user_id"),
    ("payment_events",
     "INSERT INTO payment_events (event_id, provider, event_type, user_id, asset, amount,"
     " content_hash, trace_id, payload, received_at)"
     " SELECT event_id, provider, event_type, user_id, asset, amount,"
     # Not the wire's hash (canonical JSON): a replay refuses these dead letters.
     " encode(sha256(convert_to(payload::text, 'UTF8')), 'hex'),"
     " md5('bench-console-trace' || i), payload, received_at FROM bench_plan ORDER BY i"),
    ("event_status",
     "INSERT INTO event_status (event_id, status, status_changed_at)"
     " SELECT event_id, status, received_at + interval '80 milliseconds'"
     " FROM bench_plan ORDER BY i"),
    ("processed_events",
     f"INSERT INTO processed_events (idempotency_key, event_id, event_type, outcome,"
     f" processed_at) SELECT {_KEY.format(e='event_id', t='event_type')}, event_id,"
     " event_type, CASE WHEN kind = 'rejected' THEN 'insufficient_funds' ELSE 'applied'"
     " END, received_at + interval '50 milliseconds' FROM bench_plan"
     " WHERE status <> 'dead_lettered' ORDER BY i"),
    ("accounts",
     "INSERT INTO accounts (kind, owner, asset, created_at)"
     " SELECT 'available', user_id, asset, min(received_at) FROM bench_plan WHERE transfer"
     " GROUP BY user_id, asset"
     " UNION ALL SELECT 'settlement', provider, asset, min(received_at) FROM bench_plan"
     " WHERE transfer AND kind = 'gateway' GROUP BY provider, asset"
     " UNION ALL SELECT 'custody', 'bench-console', 'USDC', min(received_at)"
     " FROM bench_plan WHERE kind = 'chain'"),
    ("transfers",
     "CREATE TEMP TABLE bench_transfers ON COMMIT DROP AS"
     " WITH made AS (INSERT INTO transfers (source_event_id, event_type, created_at)"
     "  SELECT event_id, event_type, received_at + interval '50 milliseconds'"
     "  FROM bench_plan WHERE transfer ORDER BY i RETURNING transfer_id, source_event_id)"
     " SELECT transfer_id, source_event_id AS event_id FROM made"),
    ("postings",
     "INSERT INTO postings (transfer_id, account_id, asset, amount)"
     " SELECT t.transfer_id, a.account_id, p.asset, side.amount"
     " FROM bench_transfers t JOIN bench_plan p USING (event_id)"
     " CROSS JOIN LATERAL (VALUES ('available', p.user_id, p.amount),"
     "  (CASE WHEN p.kind = 'chain' THEN 'custody' ELSE 'settlement' END,"
     "   CASE WHEN p.kind = 'chain' THEN 'bench-console' ELSE p.provider END, -p.amount))"
     "  AS side (kind, owner, amount)"
     " JOIN accounts a ON (a.kind, a.owner, a.asset) = (side.kind, side.owner, p.asset)"
     " ORDER BY t.transfer_id"),
    ("balances",
     "INSERT INTO balances (user_id, asset, balance, updated_at)"
     " SELECT user_id, asset, sum(amount), max(received_at) FROM bench_plan WHERE transfer"
     " GROUP BY user_id, asset"),
    ("deposit_addresses",
     "INSERT INTO deposit_addresses (network, address, user_id, created_at)"
     " SELECT 'bench-console', recipient, user_id, min(received_at) FROM bench_plan"
     " WHERE kind = 'chain' GROUP BY recipient, user_id"),
    ("chain_deposits",
     "INSERT INTO chain_deposits (event_id, network, tx_hash, block_number, block_hash,"
     " log_index, token_contract, recipient, raw_value, chain, user_id, asset, amount,"
     " trace_id, state, final_block_number, final_block_hash, final_log_index,"
     " recorded_at, decided_at, settled_at, credited_at)"
     " SELECT event_id, 'bench-console', tx_hash, i, '0x' || md5('block' || i) || md5(i::text),"
     " 0, '0x' || repeat('bc', 20), recipient, amount * 1000000,"
     " jsonb_build_object('decimals', 6), user_id, asset, amount,"
     " md5('bench-console-trace' || i), 'final', i, '0x' || md5('block' || i) || md5(i::text),"
     " 0, received_at, received_at + interval '12 minutes',"
     " received_at + interval '12 minutes', received_at + interval '1 second'"
     " FROM bench_plan WHERE kind = 'chain' ORDER BY i"),
    ("dead_letter_queue",
     "INSERT INTO dead_letter_queue (source_topic, source_partition, source_offset,"
     " message_key, headers, payload, event_id, error_reason, error_detail, attempts, status,"
     " first_seen_at, last_seen_at, discard_reason, provider)"
     " SELECT 'bench-console.payments', mod(i, 12), i, p.user_id,"
     " jsonb_build_object('event_id', p.event_id, 'event_type', p.event_type),"
     " p.payload::text, p.event_id, p.reason, 'bench: ' || p.reason || ' of ' || p.event_id,"
     " '[]', p.dlq_status, p.received_at + interval '2 seconds',"
     " p.received_at + interval '2 seconds',"
     " CASE WHEN p.dlq_status = 'discarded' THEN 'bench: never replayed' END,"
     " p.provider"  # as the mirror records it (consumers/dead_letters/mirror.py)
     " FROM bench_plan p WHERE p.kind = 'dead'"
     " ORDER BY i"),
    ("notification_intents",
     f"INSERT INTO notification_intents (intent_id, type, user_id, created_at, data, trace_id,"
     f" recorded_at) SELECT 'ntf_' || left({_KEY.format(e='event_id', t=_INTENT_TYPE)}, 32),"
     f" {_INTENT_TYPE}, user_id, received_at,"
     " jsonb_build_object('event_id', event_id, 'user_id', user_id, 'asset', asset,"
     " 'amount', amount::text), md5('bench-console-trace' || i),"
     " received_at + interval '1 second' FROM bench_plan WHERE transfer ORDER BY i"),
    ("notification_endpoints",
     "INSERT INTO notification_endpoints (endpoint_id, url, user_id, secret, disabled_at,"
     " disabled_reason) VALUES (%(endpoint)s, 'http://127.0.0.1:9/bench-console',"
     " 'bench-console-heavy', decode(repeat('bc', 32), 'hex'), now(), 'bench-console')"),
    ("notification_deliveries",
     f"INSERT INTO notification_deliveries (intent_id, endpoint_id, state, attempts,"
     f" next_attempt_at, last_status, created_at, delivered_at)"
     f" SELECT 'ntf_' || left({_KEY.format(e='event_id', t=_INTENT_TYPE)}, 32),"
     " %(endpoint)s, 'delivered', 1, received_at + interval '1 second', 200,"
     " received_at + interval '1 second', received_at + interval '1200 milliseconds'"
     " FROM bench_plan WHERE transfer AND user_id = 'bench-console-heavy' ORDER BY i"),
]
# Statistics the next steps' joins need, taken inside the fill's transaction (ANALYZE
# counts its own uncommitted rows): without them the planner sees empty tables and
# picks nested loops over a million rows.
_ANALYZE_AFTER = {"accounts": "accounts", "transfers": "bench_transfers"}
FILLED_TABLES = ("users", "payment_events", "event_status", "processed_events", "accounts",
                 "transfers", "postings", "balances", "deposit_addresses", "chain_deposits",
                 "dead_letter_queue", "notification_intents", "notification_endpoints",
                 "notification_deliveries")


def _own_events(cur: Cursor) -> int:
    cur.execute("SELECT count(*) FROM payment_events WHERE event_id >= %s AND event_id < %s",
                (EVENTS_LOW, EVENTS_HIGH))
    return int(one_row(cur)[0])


def fill(target: int) -> int:
    """Top payment_events up to `target` with the bench's rows (MIN_OWN at least), unless
    a fill is there already; the bench's event count."""
    conn = connect(database_url("owner"), application_name="bench-console-fill")
    try:
        with conn, conn.cursor() as cur:
            own = _own_events(cur)
            if own:
                print(f"fill: {own:,} bench events already there, not filled again")
                return own
            cur.execute("SELECT count(*) FROM payment_events")
            others = int(one_row(cur)[0])
            n = max(target - others, MIN_OWN)
            print(f"fill: {others:,} events on the stack, adding {n:,} ...", flush=True)
            # One transaction of bulk inserts: losing it in a crash loses only the fill.
            cur.execute("SET LOCAL synchronous_commit = off")
            cur.execute("SET LOCAL work_mem = '256MB'")
            began = time.monotonic()
            cur.execute(_PLAN, {"n": n, "users": USERS})
            cur.execute("ANALYZE bench_plan")
            for table, sql in _FILL:
                step = time.monotonic()
                cur.execute(sql, {"endpoint": ENDPOINT})
                rows = cur.rowcount
                if table in _ANALYZE_AFTER:
                    cur.execute(f"ANALYZE {_ANALYZE_AFTER[table]}")
                print(f"  {table:24s} {rows:>10,} rows  {time.monotonic() - step:6.1f} s",
                      flush=True)
        print(f"fill: committed in {time.monotonic() - began:.0f} s", flush=True)
    finally:
        conn.close()
    _analyze()
    return n


def _analyze() -> None:
    """Fresh statistics (and visibility maps) after a fill or a drop, so the planner sees
    the tables as they now are (autovacuum would, some time later)."""
    conn = connect(database_url("owner"), application_name="bench-console-fill")
    conn.autocommit = True  # VACUUM runs outside a transaction
    try:
        with conn.cursor() as cur:
            began = time.monotonic()
            for table in FILLED_TABLES:
                cur.execute(f"VACUUM (ANALYZE) {table}")
        print(f"vacuum analyze: {time.monotonic() - began:.0f} s", flush=True)
    finally:
        conn.close()


# Every row the fill wrote, children before parents (foreign keys).
_DROP = [
    ("notification_deliveries",
     "DELETE FROM notification_deliveries WHERE endpoint_id = %(endpoint)s"),
    ("notification_intents",
     "DELETE FROM notification_intents WHERE user_id >= %(low)s AND user_id < %(high)s"),
    ("notification_endpoints",
     "DELETE FROM notification_endpoints WHERE endpoint_id = %(endpoint)s"),
    ("postings",
     "DELETE FROM postings WHERE transfer_id IN (SELECT transfer_id FROM transfers"
     " WHERE source_event_id >= %(elow)s AND source_event_id < %(ehigh)s)"),
    ("transfers",
     "DELETE FROM transfers WHERE source_event_id >= %(elow)s"
     " AND source_event_id < %(ehigh)s"),
    ("balances", "DELETE FROM balances WHERE user_id >= %(low)s AND user_id < %(high)s"),
    ("accounts", "DELETE FROM accounts WHERE (owner >= %(low)s AND owner < %(high)s)"
                 " OR (kind = 'custody' AND owner = %(network)s)"),
    ("dead_letter_queue", "DELETE FROM dead_letter_queue WHERE source_topic = %(topic)s"),
    ("chain_deposits", "DELETE FROM chain_deposits WHERE network = %(network)s"),
    ("deposit_addresses", "DELETE FROM deposit_addresses WHERE network = %(network)s"),
    ("processed_events",
     "DELETE FROM processed_events WHERE event_id >= %(elow)s AND event_id < %(ehigh)s"),
    ("event_status",
     "DELETE FROM event_status WHERE event_id >= %(elow)s AND event_id < %(ehigh)s"),
    ("payment_events",
     "DELETE FROM payment_events WHERE event_id >= %(elow)s AND event_id < %(ehigh)s"),
    ("users", "DELETE FROM users WHERE user_id >= %(low)s AND user_id < %(high)s"),
]


def drop() -> None:
    conn = connect(database_url("owner"), application_name="bench-console-drop")
    params = {"endpoint": ENDPOINT, "low": LOW, "high": HIGH, "elow": EVENTS_LOW,
              "ehigh": EVENTS_HIGH, "topic": DLQ_TOPIC, "network": NETWORK}
    try:
        with conn, conn.cursor() as cur:
            began = time.monotonic()
            for table, sql in _DROP:
                cur.execute(sql, params)
                print(f"  {table:24s} {cur.rowcount:>10,} rows deleted", flush=True)
        print(f"drop: committed in {time.monotonic() - began:.0f} s", flush=True)
    finally:
        conn.close()
    _analyze()


# -- 2. the pages and their SQL ------------------------------------------------------------

@dataclass(frozen=True)
class Page:
    label: str
    path: str  # what the browser asks for
    expect: str  # text the answer must hold: the page did its work (not a login redirect)
    # The route's own code, called as the server calls it (request, operator, params).
    route: Callable[[Request], Coroutine[Any, Any, Any]]


class _Recording(psycopg2.extensions.cursor):
    """Keeps every statement as sent (parameters interpolated by psycopg2)."""

    sent: ClassVar[list[bytes]] = []

    def execute(self, query: Any, vars: Any = None) -> None:
        super().execute(query, vars)
        assert self.query is not None
        _Recording.sent.append(self.query)


class _CapturingDatabase(ConsoleDatabase):
    """The console's own database object (its transaction framing: READ ONLY, the
    statement timeout, commit) on one recording connection instead of its thread pool."""

    def __init__(self, settings: ConsoleSettings, conn: Connection) -> None:
        self._settings = settings
        self._conn = conn

    async def _run(self, work: Callable[[Cursor], T], *, read_only: bool) -> T:
        return self._transaction(self._conn, work, read_only)


Transaction = list[bytes]


def capture(page: Page, token: str, settings: ConsoleSettings, conn: Connection
            ) -> list[Transaction]:
    """The page's transactions as the console sends them: the session check, then the
    route's read(s), statement by statement."""
    db = _CapturingDatabase(settings, conn)
    # What the read routes take from the app's Console: its settings, database and
    # templates (the login's rate limit is no part of a read)
    console = SimpleNamespace(settings=settings, db=db, templates=templates())
    path, _, query = page.path.partition("?")
    request = Request({"type": "http", "method": "GET", "path": path,
                       "query_string": query.encode(), "headers": [],
                       "app": SimpleNamespace(state=SimpleNamespace(console=console))})
    done: list[Transaction] = []
    conn.cursor_factory = _Recording
    for work in (lambda: db.read(lambda cur: access.session_of(cur, token)),
                 lambda: page.route(request)):
        _Recording.sent = []
        answer = asyncio.run(work())
        assert answer is not None, f"{page.label}: the page found nothing"
        done.append(list(_Recording.sent))
    conn.cursor_factory = psycopg2.extensions.cursor
    return done


def run_bare(conn: Connection, transactions: list[Transaction]) -> None:
    with conn.cursor() as cur:
        for statements in transactions:
            for statement in statements:
                cur.execute(statement)
                if cur.description is not None:
                    cur.fetchall()
            conn.commit()


def start_console(log: Path) -> ConsoleServer:
    """`paystream console` on a free port with a new key (tests/support/console.py's
    start_console, its log kept out of the bench's output)."""
    key_id, key = make_key("bench")
    port = free_port()
    with log.open("ab") as out:
        proc = subprocess.Popen(paystream_argv("console", "--port", str(port)), stdout=out,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, "PAYSTREAM_LOG_LEVEL": "WARNING"})
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/login", timeout=2).status_code == 200:
                return ConsoleServer(port, proc, key_id, key)
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"paystream console did not answer on {port}: see {log}")
        time.sleep(0.2)


def pick_targets(conn: Connection) -> dict[str, str]:
    """Ids the pages look up, from the bench's rows: an event with a transfer, postings,
    a chain deposit, an intent and a delivery; its trace id and tx hash."""
    with conn.cursor() as cur:
        cur.execute("SELECT p.event_id, p.trace_id, c.tx_hash FROM payment_events p"
                    " JOIN chain_deposits c USING (event_id) JOIN transfers t"
                    " ON t.source_event_id = p.event_id WHERE p.user_id = %s"
                    " ORDER BY p.received_at DESC LIMIT 1", (HEAVY_USER,))
        found = cur.fetchone()
        conn.commit()
    if found is None:
        raise SystemExit("no bench event with a chain deposit and a transfer: run --drop, "
                         "then again")
    event_id, trace_id, tx_hash = found
    return {"event": event_id, "trace": trace_id, "tx": tx_hash}


ROW = 'href="/dead-letters/'  # a dead letter listed: the list is not empty


def pages(t: dict[str, str]) -> list[Page]:
    def search(q: str) -> Callable[[Request], Coroutine[Any, Any, Any]]:
        return lambda r: routes_search.search_page(r, None, q=q)  # type: ignore[arg-type]

    def dead_letters(**kw: str) -> Callable[[Request], Coroutine[Any, Any, Any]]:
        args = {"status": "open", "reason": "", "provider": "", "age": "", "before": None,
                **kw}
        return lambda r: routes_dead_letters.dead_letters(r, None, **args)  # type: ignore

    return [
        Page("search: event id", f"/search?q={t['event']}", t["event"], search(t["event"])),
        Page("search: user (many events)", f"/search?q={HEAVY_USER}", HEAVY_USER,
             search(HEAVY_USER)),
        Page("search: trace id", f"/search?q={t['trace']}", t["event"], search(t["trace"])),
        Page("search: tx hash", f"/search?q={t['tx']}", t["event"], search(t["tx"])),
        Page("event page (transfer)", f"/events/{t['event']}", t["tx"],
             lambda r: routes_search.event_page(r, None, event_id=t["event"])),  # type: ignore
        Page("dead letters (open)", "/dead-letters", ROW, dead_letters()),
        Page("dead letters: reason", "/dead-letters?reason=invalid_amount",
             "<td>invalid_amount</td>", dead_letters(reason="invalid_amount")),
        Page("dead letters: all, older 1h", "/dead-letters?status=all&age=older%3A1h", ROW,
             dead_letters(status="all", age="older:1h")),
        Page("user page (heavy user)", f"/users/{HEAVY_USER}", HEAVY_USER,
             lambda r: routes_search.user_page(r, None, user_id=HEAVY_USER)),  # type: ignore
        # Not in the list: the provider filter at both ends, a provider with no
        # dead-lettered event and one with half of them (its dead-lettered events are
        # read, each one's dead letters probed, then the newest page kept).
        Page("(extra) dead letters: provider with none", f"/dead-letters?provider={NO_DLQ}",
             '<td colspan="6">none</td>', dead_letters(provider=NO_DLQ)),
        Page("(extra) dead letters: provider with many",
             f"/dead-letters?provider={MANY_DLQ}", ROW, dead_letters(provider=MANY_DLQ)),
    ]


# -- 3. measuring --------------------------------------------------------------------------

def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class Measured:
    page: Page
    console_ms: list[float]
    bare_ms: list[float]
    statements: int

    def line(self) -> str:
        c50, c99 = percentile(self.console_ms, 0.50), percentile(self.console_ms, 0.99)
        b50, b99 = percentile(self.bare_ms, 0.50), percentile(self.bare_ms, 0.99)
        verdict = "met" if c99 <= TARGET_P99_MS else "MISSED"
        return (f"| {self.page.label} | {self.statements} | {c50:.1f} / {c99:.1f} |"
                f" {b50:.1f} / {b99:.1f} | {c50 - b50:+.1f} / {c99 - b99:+.1f} |"
                f" {c99:.1f} ms <= {TARGET_P99_MS:.0f} ms: **{verdict}** |")


def measure(page: Page, http: requests.Session, base: str, bare: Connection,
            transactions: list[Transaction], n: int) -> Measured:
    url = base + page.path

    def one_http() -> float:
        began = time.perf_counter()
        answer = http.get(url, timeout=30, allow_redirects=False)
        elapsed = (time.perf_counter() - began) * 1000
        if answer.status_code != 200 or page.expect not in answer.text:
            raise SystemExit(f"{page.label}: {answer.status_code} {answer.text[:300]!r}")
        return elapsed

    def one_bare() -> float:
        began = time.perf_counter()
        run_bare(bare, transactions)
        return (time.perf_counter() - began) * 1000

    for _ in range(WARM_UP):
        one_http()
        one_bare()
    console_ms, bare_ms = [], []
    for _ in range(n):  # interleaved: a disturbance of the host hits both sides alike
        console_ms.append(one_http())
        bare_ms.append(one_bare())
    return Measured(page, console_ms, bare_ms, sum(len(t) for t in transactions))


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def table_sizes(conn: Connection) -> str:
    with conn.cursor() as cur:
        cur.execute("SELECT relname, n_live_tup FROM pg_stat_user_tables WHERE relname ="
                    " ANY(%s) ORDER BY n_live_tup DESC", (list(FILLED_TABLES),))
        rows = cur.fetchall()
        conn.commit()
    return ", ".join(f"{name} {count:,}" for name, count in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="measured requests a page")
    parser.add_argument("--events", type=int, default=1_000_000,
                        help="payment_events to fill the database up to")
    parser.add_argument("--drop", action="store_true",
                        help="delete every row the bench's fill wrote, then exit")
    parser.add_argument("--fill-only", action="store_true", help="fill, then exit")
    parser.add_argument("--only", default="", help="measure the pages whose label has this")
    args = parser.parse_args()

    if args.drop:
        drop()
        return 0
    print(f"console benchmark: {os.cpu_count()} CPUs (nproc), load average {load_average()}"
          f" at start; database {where(database_url('ops'))}")
    fill(args.events)
    if args.fill_only:
        return 0
    settings = ConsoleSettings.from_env(os.environ)
    bare = connect(database_url("ops"), application_name="bench-console-bare")
    recording = connect(database_url("ops"), application_name="bench-console-capture")
    print(f"tables (live rows): {table_sizes(bare)}")
    targets = pick_targets(bare)
    server = start_console(Path("/tmp/console-bench.log"))
    results: list[Measured] = []
    try:
        http = server.login()
        token = http.cookies.get(SESSION_COOKIE)
        assert token, "the login set no session cookie"
        for page in [p for p in pages(targets) if args.only in p.label]:
            transactions = capture(page, token, settings, recording)
            results.append(measure(page, http, server.url, bare, transactions, args.requests))
            print(f"  {page.label}: done (load average {load_average()})", flush=True)
    finally:
        server.stop()
        subprocess.run(paystream_argv("console", "keys", "revoke", server.key_id),
                       capture_output=True, timeout=60, check=False)
        bare.close()
        recording.close()
    print(f"\nconsole pages, {args.requests} sequential requests each after {WARM_UP} warm-up,"
          f" each followed by the page's SQL bare (same statements and parameters, one"
          f" connection as paystream_ops, no HTTP, no rendering); load average"
          f" {load_average()} at the end, {os.cpu_count()} CPUs\n")
    print("statements: what one request sends, both sides: the session check's transaction"
          " and the page's, each with its SET TRANSACTION READ ONLY and SET LOCAL"
          " statement_timeout\n")
    print("| page | statements | console p50 / p99 ms | bare SQL p50 / p99 ms |"
          " difference p50 / p99 ms | target p99 |")
    print("|---|---|---|---|---|---|")
    for measured in results:
        print(measured.line())
    missed = [m.page.label for m in results
              if percentile(m.console_ms, 0.99) > TARGET_P99_MS]
    verdict = "every page met it" if not missed else "MISSED by " + ", ".join(missed)
    print(f"\nverdict: {verdict} (target p99 <= {TARGET_P99_MS:.0f} ms)")
    means = [statistics.fmean(m.console_ms) - statistics.fmean(m.bare_ms) for m in results]
    print(f"the console's own cost (HTTP, session, rendering), mean over pages:"
          f" {statistics.fmean(means):.1f} ms a request")
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
