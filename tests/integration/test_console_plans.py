"""The console's reads use an index and read about what they show (migration 0029), as
test_read_paths.py checks the API's and the loops': each statement is captured as the
console's own code sends it (the search, the event's story, the routes of the
dead-letter and user pages in the console's own transaction framing, the audit), as
paystream_ops, then run again under EXPLAIN ANALYZE with sequential scans priced out.
No big table may be read by a Seq Scan, and the rows a statement reads (returned by its
scans, plus those read and thrown away) must stay near the rows it shows. Each kind of
read has noise next to its answer that a plan without the right index would have to
read: 300 events of the same user, 300 chain deposits to the same address, 300 dead
letters of each kind a filter must skip, 300 holds and shortfalls of another user, 300
audit records of another action, and 300 rows in every small table a search reads (on a
table of ten rows any plan reads little, and the planner may walk another index).
Where a plan is chosen by how rare the answer is among its table's rows, the world holds
those tables at a size where it is rare, as on a stack that has run: 3,000 older
discarded dead letters and 3,000 older notification intents (on a fresh stack's few
hundred, walking the primary key and filtering is the cheaper plan, and the planner
takes it). `make bench-console` measures the same pages on a million events."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from starlette.requests import Request

from paystream.console import routes_search, search, story
from paystream.console.app import templates
from paystream.console_kit import audit
from paystream.console_kit.database import ConsoleDatabase
from paystream.console_kit.settings import ConsoleSettings
from paystream.consumers.dead_letters import console_routes as routes_dead_letters
from paystream.consumers.dead_letters.replay import DeadLetterFilter, matching_ids
from paystream.notify.intents import IntentType, intent_id
from paystream.schema.db import Connection, Cursor, connect, database_url, one_row
from paystream.schema.idempotency import idempotency_key
from tests.support.ids import unique
from tests.support.ledger import plant_transfer
from tests.support.recording import SENT, Recording

T = TypeVar("T")
NOISE = 300  # rows next to each answer that a read without its index would go through
BULK = 3000  # older rows that make an answer rare in its table, as on a stack that has run
SLACK = 10  # rows a fitting plan may read beyond its answer (a page's +1, a probe)
HISTORY_PAGE = routes_search.HISTORY_PAGE
DLQ_PAGE = routes_dead_letters.PAGE + 1  # the page asks for one more: is there a next?
# A page's ids from an index alone, then its rows by id: each row read twice.
DLQ_READ = 2 * DLQ_PAGE + SLACK
BIG = frozenset({"payment_events", "event_status", "processed_events", "dead_letter_queue",
                 "chain_deposits",
                 "transfers", "postings", "notification_intents", "notification_deliveries",
                 "operator_actions"})
# Not big, but read per user on the user page: reading every user's is a scan all the same.
PER_USER = frozenset({"holds", "account_shortfalls", "balances", "accounts", "users",
                      "deposit_addresses", "api_idempotency"})
WATCHED = BIG | PER_USER

def _ops() -> Connection:
    """A connection as the console's role, recording every statement."""
    conn = connect(database_url("ops"))
    conn.cursor_factory = Recording
    return conn


def _sent_by(work: Callable[[Cursor], T]) -> tuple[T, list[bytes]]:
    """What `work` answers, and the statements it sent, in one transaction as paystream_ops."""
    conn = _ops()
    try:
        SENT.clear()
        with conn, conn.cursor() as cur:
            answer = work(cur)
        return answer, list(SENT)
    finally:
        conn.close()


class _OneConnection(ConsoleDatabase):
    """The console's own database object (its READ ONLY transaction, its statement
    timeout) on one recording connection instead of its threads: a route's reads are
    sent exactly as the server sends them."""

    def __init__(self, conn: Connection) -> None:
        self._settings = ConsoleSettings.from_env(os.environ)
        self._conn = conn

    async def _run(self, work: Callable[[Cursor], T], *, read_only: bool) -> T:
        return self._transaction(self._conn, work, read_only)


def _route_sent(call: Callable[[Request], Coroutine[Any, Any, Any]]) -> list[bytes]:
    """The queries a console route sends (its framing's SETs left out: not plans)."""
    conn = _ops()
    try:
        # What the read routes take from the app's Console: its settings, database and
        # templates (the login's rate limit is no part of a read)
        console = SimpleNamespace(settings=ConsoleSettings.from_env(os.environ),
                                  db=_OneConnection(conn), templates=templates())
        request = Request({"type": "http", "method": "GET", "path": "/", "query_string": b"",
                           "headers": [],
                           "app": SimpleNamespace(state=SimpleNamespace(console=console))})
        SENT.clear()
        answer = asyncio.run(call(request))
        assert answer.status_code == 200, answer.body[:500]
        return [s for s in SENT if not s.startswith(b"SET ")]
    finally:
        conn.close()


@dataclass(frozen=True)
class Scan:
    table: str
    node: str  # "Index Scan payment_events_pkey", ...
    rows: int  # what the scan returned, over all its loops
    thrown: int  # read and filtered away (filter, recheck), over all its loops
    # A bitmap index scan's rows are index entries: under a BitmapAnd, many more than
    # the heap scan above it keeps (two indexes read whole where one would fit).
    entries: bool = False

    def __str__(self) -> str:
        if self.entries:
            return f"{self.node} of {self.table}: {self.rows} index entries"
        return f"{self.node} on {self.table}: {self.rows} rows, {self.thrown} thrown away"


_INDEX_TABLES: dict[str, str] = {}  # index name -> its table: a bitmap index scan names none
_PARENTS: dict[str, str] = {}  # a partition -> its table (processed_events_legacy -> ...)


def _table_of(db: Connection, index: str) -> str:
    if index not in _INDEX_TABLES:
        with db.cursor() as cur:
            cur.execute("SELECT indexname, tablename FROM pg_indexes"
                        " WHERE schemaname = current_schema()")
            _INDEX_TABLES.update(dict(cur.fetchall()))
    return _whole(db, _INDEX_TABLES[index])


def _whole(db: Connection, table: str) -> str:
    """The table `table` is a partition of (a plan names the partition it reads), or
    `table` itself: a watched table read through its partitions is watched all the same."""
    if table not in _PARENTS:
        with db.cursor() as cur:
            cur.execute("SELECT c.relname, p.relname FROM pg_inherits i"
                        " JOIN pg_class c ON c.oid = i.inhrelid"
                        " JOIN pg_class p ON p.oid = i.inhparent")
            _PARENTS.update(dict(cur.fetchall()))
        _PARENTS.setdefault(table, table)
    return _PARENTS[table]


def _scans(db: Connection, statement: bytes) -> tuple[int, list[Scan]]:
    """The rows `statement` answers and the scans it reads tables with, under EXPLAIN
    ANALYZE (rolled back) with sequential scans priced out."""
    with db.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute(b"EXPLAIN (ANALYZE, FORMAT JSON) " + statement)
        plan = one_row(cur)[0]
        cur.execute("ROLLBACK")
    if isinstance(plan, str):
        plan = json.loads(plan)
    found: list[Scan] = []

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node:
            loops = int(node.get("Actual Loops", 0))
            # EXPLAIN gives a node's rows and rows removed per loop
            found.append(Scan(_whole(db, node["Relation Name"]),
                              f"{node['Node Type']} {node.get('Index Name', '')}".strip(),
                              round(float(node.get("Actual Rows", 0)) * loops),
                              round((float(node.get("Rows Removed by Filter", 0))
                                     + float(node.get("Rows Removed by Index Recheck", 0)))
                                    * loops)))
        elif node["Node Type"] == "Bitmap Index Scan":
            found.append(Scan(_table_of(db, node["Index Name"]),
                              f"Bitmap Index Scan {node['Index Name']}",
                              round(float(node.get("Actual Rows", 0))
                                    * int(node.get("Actual Loops", 0))), 0, entries=True))
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return int(plan[0]["Plan"]["Actual Rows"]), found


def _check(db: Connection, statement: bytes, *, most: int | None = None,
           thrown: int = SLACK) -> list[Scan]:
    """No Seq Scan of a watched table; at most `thrown` of its rows read and filtered away;
    at most `most` rows read of each (by default what the statement answers + SLACK)."""
    answered, scans = _scans(db, statement)
    watched = [s for s in scans if s.table in WATCHED]
    why = f"{statement.decode()[:400]}\n  " + "\n  ".join(str(s) for s in scans)
    assert not [s for s in watched if s.node.startswith("Seq Scan")], "a scan:\n" + why
    assert sum(s.thrown for s in watched) <= thrown, f"read and thrown away:\n{why}"
    limit = answered + SLACK if most is None else most
    for table in {s.table for s in watched}:
        read = max(sum(s.rows + s.thrown for s in watched if s.table == table
                       and not s.entries),
                   sum(s.rows for s in watched if s.table == table and s.entries))
        assert read <= limit, f"{read} rows of {table} read for {answered} (<= {limit}):\n{why}"
    return scans


def _hex(chars: int) -> str:
    return secrets.token_hex(chars)[:chars]


@dataclass(frozen=True)
class World:
    """One event with every part of a story, and the noise around it."""

    user: str  # the event's user: HISTORY events, transfers, one address
    other: str  # the noise's user
    provider: str
    event: str
    trace: str
    ledger_key: str  # the ledger's idempotency key of the event (64 hex)
    tx_hash: str
    address: str
    merchant_key: str
    withdrawal: str  # the event the merchant's Idempotency-Key names
    intent: str
    dead_letter: int  # the event's own dead letter
    targets: list[int]  # the 5 open dead letters of `reason` and `provider`
    reason: str
    old_middle: int  # a dead letter in the middle of the two-day-old block, for paging
    action: str  # an audit action recorded once, before NOISE of another
    action_id: int


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    p = unique("cplan")
    user, other, provider, other_provider = f"{p}-u", f"{p}-n", f"{p}-gw", f"{p}-other"
    event, network, topic = f"{p}-e", f"{p}-net", f"{p}-topic"
    tx_hash, address = "0x" + _hex(64), "0x" + _hex(40)
    withdrawal, merchant_key = "api:withdrawal:" + _hex(32), f"{p}-mk"
    reason, action = f"{p}-rt", f"{p}-act"
    conn = connect(database_url("owner"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO users (user_id) VALUES (%s), (%s)", (user, other))
            # The event, NOISE of its user's history (older), NOISE of the other user.
            # Each with its status row (event_status), as the outbox writes them.
            cur.execute(
                "WITH v(e, pr, u, st, t, at) AS ("
                "  SELECT %(event)s, %(provider)s, %(user)s, 'applied', %(p)s || '-trace',"
                "   now()"
                # (older by a minute at least: a tie with the event's time would leave
                # "newest first" to the plan)
                "  UNION ALL SELECT %(p)s || '-h' || g, %(provider)s, %(user)s, 'applied',"
                "   %(p)s || '-ht' || g, now() - (g + 1) * interval '1 minute'"
                "   FROM generate_series(0, %(n)s - 1) g"
                "  UNION ALL SELECT %(p)s || '-x' || g, %(other_provider)s, %(other)s,"
                "   'dead_lettered', %(p)s || '-xt' || g, now() - interval '2 days'"
                "   FROM generate_series(0, %(n)s - 1) g"
                # the open dead letters' events, dead-lettered as the mirror leaves them:
                # what the provider filter finds them by; 5 of the user's, and NOISE
                # older of the other user's, of the same provider
                "  UNION ALL SELECT %(p)s || '-d' || g, %(provider)s, %(user)s,"
                "   'dead_lettered', %(p)s || '-dt' || g, now() - interval '1 day'"
                "   FROM generate_series(0, 4) g"
                "  UNION ALL SELECT %(p)s || '-y' || g, %(provider)s, %(other)s,"
                "   'dead_lettered', %(p)s || '-yt' || g, now() - interval '2 days'"
                "   FROM generate_series(0, %(n)s - 1) g"
                # ids sorting first: a merge join walking the key from its start reads them
                "  UNION ALL SELECT '0' || %(p)s || '-f' || g, %(other_provider)s, %(other)s,"
                "   'applied', %(p)s || '-ft' || g, now() - interval '3 days'"
                "   FROM generate_series(0, %(n)s - 1) g),"
                " i AS (INSERT INTO payment_events (event_id, provider, event_type, user_id,"
                "  asset, amount, content_hash, trace_id, payload, received_at)"
                "  SELECT e, pr, 'deposit', u, 'USDC', 1, md5(e), t, '{}', at FROM v)"
                " INSERT INTO event_status (event_id, status) SELECT e, st FROM v",
                {"event": event, "provider": provider, "user": user, "p": p, "n": NOISE,
                 "other_provider": other_provider, "other": other})
            keys = [idempotency_key(event, "deposit"),
                    *(idempotency_key(f"{p}-h{i}", "deposit") for i in range(NOISE))]
            cur.execute("INSERT INTO processed_events (idempotency_key, event_id, event_type,"
                        " outcome) SELECT k, e, 'deposit', 'applied'"
                        " FROM unnest(%s::text[], %s::text[]) AS v(k, e)",
                        (keys, [event, *(f"{p}-h{i}" for i in range(NOISE))]))
            # A withdrawal the merchant API requested, under a merchant's Idempotency-Key.
            key_id = "ak_" + _hex(16)
            cur.execute("INSERT INTO api_keys (key_id, name, key_hash, scopes, revoked_at)"
                        " VALUES (%s, 'console plans', %s, '{write}', now())",
                        (key_id, _hex(64)))
            cur.execute("INSERT INTO api_withdrawals (withdrawal_id, key_id, user_id, asset,"
                        " amount, destination) VALUES (%s, %s, %s, 'USDC', 1, 'x')",
                        (withdrawal, key_id, user))
            cur.execute("INSERT INTO payment_events (event_id, provider, event_type, user_id,"
                        " asset, amount, content_hash, trace_id, payload, received_at)"
                        " VALUES (%s, 'api', 'withdrawal_requested', %s, 'USDC', 1,"
                        " md5(%s), %s, '{}', now() - interval '3 days');"
                        " INSERT INTO event_status (event_id, status) VALUES (%s, 'rejected')",
                        (withdrawal, user, withdrawal, f"{p}-wt", withdrawal))
            cur.execute("INSERT INTO api_idempotency (key_id, idempotency_key, request_hash,"
                        " status_code, response, withdrawal_id) VALUES (%s, %s, %s, 201, '{}',"
                        " %s)", (key_id, merchant_key, _hex(64), withdrawal))
            # ... and NOISE more of the other user's
            cur.execute("INSERT INTO api_withdrawals (withdrawal_id, key_id, user_id, asset,"
                        " amount, destination) SELECT 'api:withdrawal:' || md5(%s || g), %s,"
                        " %s, 'USDC', 1, 'x' FROM generate_series(1, %s) g",
                        (p, key_id, other, NOISE))
            cur.execute("INSERT INTO api_idempotency (key_id, idempotency_key, request_hash,"
                        " status_code, response, withdrawal_id) SELECT %s, %s || '-mk' || g,"
                        " md5(%s || g) || md5(%s || g), 201, '{}',"
                        " 'api:withdrawal:' || md5(%s || g) FROM generate_series(1, %s) g",
                        (key_id, p, p, p, p, NOISE))
            # Its transfer and the history's, by the ledger's writer, and the balance
            # they add up to (`paystream reconcile` stays clean): six pages of postings,
            # on a fresh stack most of the table (a page must still read a page).
            for source in [event, *(f"{p}-h{i}" for i in range(NOISE))]:
                plant_transfer(cur, source, "deposit", user, "USDC", Decimal(1))
            cur.execute("INSERT INTO balances (user_id, asset, balance) VALUES"
                        " (%s, 'USDC', %s), (%s, 'USDC', 0)", (user, NOISE + 1, other))
            # The chain: the event's deposit, and NOISE more to the same address (reorged:
            # released, so no custody check counts them while they exist).
            cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                        " VALUES (%s, %s, %s)", (network, address, user))
            cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                        " SELECT %s, '0x' || left(md5(%s || g) || md5(%s || g), 40), %s"
                        " FROM generate_series(1, %s) g", (network, p, p, other, NOISE))
            cur.execute(
                "INSERT INTO chain_deposits (event_id, network, tx_hash, block_number,"
                " recipient, raw_value, chain, user_id, asset, amount, trace_id, state,"
                " recorded_at) SELECT e, %(net)s, tx, g, %(addr)s, 1, '{}', %(user)s, 'USDC',"
                " 1, 't', 'reorged', now() - g * interval '1 second' FROM ("
                "  SELECT %(event)s, %(tx)s, 0 UNION ALL SELECT %(p)s || '-h' || g,"
                "  '0x' || lpad(to_hex(g), 64, 'c'), g FROM generate_series(1, %(n)s) g)"
                " AS v(e, tx, g)",
                {"net": network, "addr": address, "user": user, "event": event, "tx": tx_hash,
                 "p": p, "n": NOISE})
            # Its notification, delivered to an endpoint disabled from the start.
            endpoint, intent = "ep_" + _hex(24), intent_id(event, IntentType.DEPOSIT_CREDITED)
            cur.execute("INSERT INTO notification_endpoints (endpoint_id, url, user_id, secret,"
                        " disabled_at, disabled_reason) VALUES (%s, 'http://127.0.0.1:9/x', %s,"
                        " %s, now(), 'test_console_plans')", (endpoint, user, os.urandom(32)))
            cur.execute("INSERT INTO notification_intents (intent_id, type, user_id,"
                        " created_at, data) VALUES (%s, 'deposit.credited', %s, now(), '{}')",
                        (intent, user))
            cur.execute("INSERT INTO notification_intents (intent_id, type, user_id,"
                        " created_at, data, recorded_at) SELECT 'ntf_' || md5(%s || g),"
                        " 'deposit.credited', %s, now(), '{}', now() - g * interval '1 second'"
                        " FROM generate_series(1, %s) g", (p, other, NOISE))
            cur.execute("INSERT INTO notification_intents (intent_id, type, user_id,"
                        " created_at, data, recorded_at) SELECT 'ntf_' || md5(%s || g),"
                        " 'deposit.credited', %s, now(), '{}', now() - interval '3 days'"
                        " FROM generate_series(1, %s) g", (f"{p}-bulk", other, BULK))
            cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id, state,"
                        " attempts, delivered_at) SELECT i, %s, 'delivered', 1, now()"
                        " FROM unnest(%s || ARRAY(SELECT 'ntf_' || md5(%s || g)"
                        " FROM generate_series(1, %s) g)) AS i", (endpoint, [intent], p, NOISE))
            # Dead letters, oldest first (ids rise with first_seen_at, as the mirror's):
            # BULK discarded three days old; NOISE open two days old (provider
            # `provider`); the event's (replayed: it was applied since); 5 open of
            # `reason` (provider `provider`); NOISE replayed of the same reason; NOISE open
            # of another reason and provider, the newest. Offsets: a block each.
            cur.execute(
                "INSERT INTO dead_letter_queue (source_topic, source_partition, source_offset,"
                " payload, event_id, error_reason, error_detail, status, discard_reason,"
                " first_seen_at)"
                " SELECT %(topic)s, 0, o, '{}', e, r, 'test', st,"
                "  CASE st WHEN 'discarded' THEN 'test' END, at FROM ("
                "  SELECT g, %(p)s || '-z' || g, %(p)s || '-bulk', 'discarded',"
                "   now() - interval '3 days' + g * interval '1 second'"
                "   FROM generate_series(0, %(bulk)s - 1) g"
                "  UNION ALL SELECT %(b)s + g, %(p)s || '-y' || g, %(p)s || '-old', 'open',"
                "   now() - interval '2 days' + g * interval '1 second'"
                "   FROM generate_series(0, %(n)s - 1) g"
                "  UNION ALL SELECT 2 * %(b)s, %(event)s, %(p)s || '-re', 'replayed',"
                "   now() - interval '10 minutes'"
                "  UNION ALL SELECT 2 * %(b)s + 1 + g, %(p)s || '-d' || g, %(reason)s, 'open',"
                "   now() - interval '10 minutes' FROM generate_series(0, 4) g"
                "  UNION ALL SELECT 3 * %(b)s + g, %(p)s || '-x' || g, %(reason)s, 'replayed',"
                "   now() - interval '5 minutes' FROM generate_series(0, %(n)s - 1) g"
                "  UNION ALL SELECT 4 * %(b)s + g, %(p)s || '-x' || g, %(p)s || '-new', 'open',"
                "   now() - interval '1 minute' FROM generate_series(0, %(n)s - 1) g"
                " ) AS v(o, e, r, st, at) ORDER BY o RETURNING id, source_offset",
                {"topic": topic, "p": p, "n": NOISE, "bulk": BULK, "b": 10 * BULK,
                 "event": event, "reason": reason})
            ids = dict((int(o), int(i)) for i, o in cur.fetchall())
            first = 10 * BULK  # the offset of the two-day-old block's first, ...
            event_at, targets_at = 2 * first, 2 * first + 1
            # The provider of each dead letter whose event is dead-lettered, as the mirror
            # records it (consumers/dead_letters/mirror.py).
            cur.execute("UPDATE dead_letter_queue d SET provider = p.provider"
                        " FROM payment_events p JOIN event_status s USING (event_id)"
                        " WHERE p.event_id = d.event_id"
                        " AND s.status = 'dead_lettered' AND d.source_topic = %s", (topic,))
            # The user page's per-user reads: NOISE open holds and resolved shortfalls of
            # the other user.
            cur.execute("INSERT INTO holds (hold_id, user_id, asset, provider, amount,"
                        " expires_at) SELECT %s || '-hold' || g, %s, 'USDC', 'test', 1,"
                        " now() + interval '1 day' FROM generate_series(1, %s) g",
                        (p, other, NOISE))
            cur.execute("INSERT INTO account_shortfalls (user_id, asset, source_event_id,"
                        " deposit_event_id, amount, resolved_at, resolution)"
                        " SELECT %s, 'USDC', %s || '-sf' || g, %s || '-x0', 1, now(), 'test'"
                        " FROM generate_series(1, %s) g", (other, p, p, NOISE))
            # The audit: one record of `action`, then NOISE of another.
            cur.execute("INSERT INTO operator_actions (actor, action, target, result)"
                        " VALUES ('test', %s, 'x', 'done') RETURNING id", (action,))
            action_id = int(one_row(cur)[0])
            cur.execute("INSERT INTO operator_actions (actor, action, target, result)"
                        " SELECT 'test', %s, 'x', 'done' FROM generate_series(1, %s)",
                        (f"{p}-noise", NOISE))
            for table in sorted(WATCHED):  # the planner sees the rows just written
                cur.execute(f"ANALYZE {table}")
            # ... and the dead letters as autovacuum leaves them: all-visible, so a count
            # can be read from an index alone
            cur.execute("VACUUM dead_letter_queue")
            # ... and the postings: a page of an account's history is an index-only read
            cur.execute("VACUUM postings")
        yield World(user, other, provider, event, f"{p}-trace", keys[0], tx_hash, address,
                    merchant_key, withdrawal, intent, ids[event_at],
                    [ids[targets_at + i] for i in range(5)], reason, ids[first + NOISE // 2],
                    action, action_id)
    finally:
        with conn.cursor() as cur:  # what another test could count or act on
            cur.execute("DELETE FROM chain_deposits WHERE network = %s", (network,))
            cur.execute("DELETE FROM deposit_addresses WHERE network = %s", (network,))
            cur.execute("DELETE FROM holds WHERE user_id = %s", (other,))
            cur.execute("DELETE FROM account_shortfalls WHERE user_id = %s", (other,))
            cur.execute("UPDATE dead_letter_queue SET status = 'discarded',"
                        " discard_reason = 'test over' WHERE source_topic = %s"
                        " AND status = 'open'", (topic,))
        conn.close()


def test_search_finds_every_kind_of_id_by_an_index(db: Connection, world: World) -> None:
    w = world
    # (query, what it finds): real answers first, then every statement's plan.
    cases: list[tuple[str, Callable[[search.Found], bool]]] = [
        (w.event, lambda f: [e.event_id for e in f.events] == [w.event]),
        (w.trace, lambda f: [(e.event_id, e.found_as) for e in f.events]
         == [(w.event, "trace id")]),
        (w.user, lambda f: f.users == [w.user] and len(f.events) == search.PAGE
         and {e.user_id for e in f.events} == {w.user}),
        (w.ledger_key, lambda f: [(e.event_id, e.found_as) for e in f.events]
         == [(w.event, "ledger idempotency key")]),
        (w.tx_hash, lambda f: [(e.event_id, e.found_as) for e in f.events]
         == [(w.event, "transaction hash")]),
        (w.address, lambda f: len(f.events) == search.PAGE and f.events[0].event_id == w.event
         and [a[1:] for a in f.addresses] == [(w.address, w.user)]),
        (w.merchant_key, lambda f: [e.event_id for e in f.events] == [w.withdrawal]),
        (w.intent, lambda f: f.intents == [w.intent]),
        (str(w.dead_letter), lambda f: f.dead_letters == [w.dead_letter]),
    ]
    for query, right in cases:
        found, sent = _sent_by(partial(search.find, query=query))
        assert right(found), (query, found)
        for statement in sent:
            _check(db, statement)


def test_an_events_story_reads_each_part_by_its_key(db: Connection, world: World) -> None:
    told, sent = _sent_by(lambda cur: story.story(cur, world.event))
    assert told is not None
    assert [o[:2] for o in told.outcomes] == [("deposit", "applied")]
    assert len(told.transfers) == 1 and len(told.transfers[0]["postings"]) == 2
    assert told.chain is not None and told.chain["tx_hash"] == world.tx_hash
    assert [d["id"] for d in told.dead_letters] == [world.dead_letter]
    assert [(n["intent_id"], len(n["deliveries"])) for n in told.notifications] \
        == [(world.intent, 1)]
    assert len(sent) == 9  # every part read: the event, outcomes, ... deliveries
    for statement in sent:
        _check(db, statement)


def _dead_letters_page(**query: Any) -> list[bytes]:
    """The list's statement and the open reasons' of GET /dead-letters?<query>."""
    args = {"status": "open", "reason": "", "provider": "", "age": "", "before": None, **query}
    sent = _route_sent(lambda r: routes_dead_letters.dead_letters(r, None, **args))  # type: ignore[arg-type]
    assert len(sent) == 2, sent
    return sent


def _ids_of(db: Connection, statement: bytes) -> list[Any]:
    """The first column of what `statement` answers."""
    with db.cursor() as cur:
        cur.execute(statement)
        return [row[0] for row in cur.fetchall()]


def _ids(db: Connection, statement: bytes) -> list[int]:
    return [int(i) for i in _ids_of(db, statement)]


def _newer_than_an_hour(db: Connection) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM dead_letter_queue"
                    " WHERE first_seen_at >= now() - interval '1 hour'")
        return int(one_row(cur)[0])


def test_the_dead_letter_list_reads_a_page_by_status_age_and_page(db: Connection,
                                                                  world: World) -> None:
    # status (open, the default): the newest page of the open ones
    listed, _ = _dead_letters_page()
    assert len(_ids(db, listed)) == DLQ_PAGE
    _check(db, listed, most=DLQ_READ)
    # another status: the replayed ones, under NOISE newer open ones
    listed, _ = _dead_letters_page(status="replayed")
    assert len(_ids(db, listed)) == DLQ_PAGE
    _check(db, listed, most=DLQ_READ)
    # newer than an hour: the open ones of the last hour, not the two-day-old block
    listed, _ = _dead_letters_page(age="1h")
    assert len(_ids(db, listed)) == DLQ_PAGE
    _check(db, listed, most=DLQ_READ)
    # older than an hour, any status: newest first, so the last hour's are skipped (the
    # health check's window: few, or an alert is up) and no more
    listed, _ = _dead_letters_page(status="all", age="older:1h")
    assert len(_ids(db, listed)) == DLQ_PAGE
    skipped = _newer_than_an_hour(db)
    _check(db, listed, most=DLQ_READ + skipped, thrown=skipped + SLACK)
    # the next page, below a dead letter in the middle of the old block
    listed, _ = _dead_letters_page(before=world.old_middle)
    assert _ids(db, listed)[0] == world.old_middle - 1
    _check(db, listed, most=DLQ_READ)


def test_a_reason_reads_its_open_dead_letters_not_its_replayed_ones(db: Connection,
                                                                    world: World) -> None:
    """After an incident a reason has many replayed dead letters and a few open: the page
    and a bulk replay read the open ones (an index on status and reason)."""
    listed, _ = _dead_letters_page(reason=world.reason)
    assert _ids(db, listed) == sorted(world.targets, reverse=True)
    _check(db, listed, most=2 * len(world.targets) + SLACK)
    # a bulk replay's ids (its confirm step and its run), oldest first
    ids, sent = _sent_by(lambda cur: matching_ids(cur, DeadLetterFilter(reason=world.reason),
                                                  1001))
    assert ids == sorted(world.targets)
    _check(db, sent[-1])


def test_a_provider_reads_a_page_of_its_dead_letters(db: Connection, world: World) -> None:
    """The provider of the stored, dead-lettered events: under NOISE newer open dead
    letters of another provider (not a probe of payment_events for every open dead
    letter), and over NOISE older ones of its own (not all of the provider's events, each
    one's dead letters probed, then sorted for the newest page)."""
    listed, _ = _dead_letters_page(provider=world.provider)
    shown = _ids(db, listed)
    assert shown[:5] == sorted(world.targets, reverse=True) and len(shown) == DLQ_PAGE
    _check(db, listed, most=DLQ_READ)


def test_the_open_dead_letters_are_counted_by_reason_from_an_index(db: Connection,
                                                                   world: World) -> None:
    """The list page's "open, by reason": a count of the open backlog by nature, read from
    an index alone (an index-only scan of the open part), never the table."""
    _, counted = _dead_letters_page()
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM dead_letter_queue WHERE status = 'open'")
        backlog = int(one_row(cur)[0])
    scans = _check(db, counted, most=backlog, thrown=0)
    assert [s.node.split()[:3] for s in scans] == [["Index", "Only", "Scan"]], \
        [str(s) for s in scans]


def _user_page(world: World) -> tuple[list[bytes], list[bytes]]:
    """GET /users/<user>'s statements: its history page's, and the others."""
    sent = _route_sent(lambda r: routes_search.user_page(r, None, user_id=world.user))  # type: ignore[arg-type]
    history = [s for s in sent if s.startswith(b"WITH page AS")]
    assert len(history) == 1 and len(sent) == 6, sent
    return history, [s for s in sent if s not in history]


def test_the_user_pages_events_and_history_read_a_page(db: Connection, world: World) -> None:
    history, others = _user_page(world)
    # a page of the user's account's postings, then the page's own (two each)
    _check(db, history[0], most=(HISTORY_PAGE + 1) * 3)
    recent = [s for s in others if b"ORDER BY received_at DESC LIMIT 20" in s]
    assert len(recent) == 1, others
    assert _ids_of(db, recent[0])[0] == world.event  # newest first, 20 of its 307
    _check(db, recent[0])
    for statement in others:
        if b" FROM holds " not in statement and b" FROM account_shortfalls " not in statement:
            _check(db, statement)


def test_the_user_pages_holds_and_shortfalls_are_read_by_user(db: Connection,
                                                              world: World) -> None:
    """Not every user's open holds and shortfalls (NOISE of another user), filtered."""
    _, others = _user_page(world)
    per_user = [s for s in others if b" FROM holds " in s or b" FROM account_shortfalls " in s]
    assert len(per_user) == 2, others
    for statement in per_user:
        _check(db, statement)


def test_the_audit_reads_the_newest_records_by_an_index(db: Connection, world: World
                                                        ) -> None:
    newest, sent = _sent_by(lambda cur: audit.recent(cur))
    assert len(newest) == audit.PAGE
    _check(db, sent[-1])
    below, sent = _sent_by(lambda cur: audit.recent(cur, before_id=world.action_id + 1))
    assert below[0].id == world.action_id
    _check(db, sent[-1])
    last, sent = _sent_by(lambda cur: audit.last_of(cur, world.action))
    assert last is not None and last.id == world.action_id
    _check(db, sent[-1])
