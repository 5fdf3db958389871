"""Loops and requests read what they ask for, not the table's whole history (migration
0016). Each statement is captured as the real code sends it and run again under
EXPLAIN ANALYZE with sequential scans priced out: the rows Postgres read and threw away
say whether an index fits the question. A table of settled history must cost nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from paystream.api import reads
from paystream.finality.store import ChainDepositStore
from paystream.notify import operator
from paystream.schema import users as user_rows
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from tests.support.consumers import record_of, store_events, wire_message
from tests.support.ids import unique
from tests.support.ledger import ledger_apply
from tests.support.notify import add_endpoint
from tests.support.recording import SENT, Recording, analyzed, nodes

SETTLED = 300  # deposits of the test's network already final: history no read needs
UNSETTLED = ["crediting", "reversing"]  # what the reads may look at (and filter)


def _recording_connection() -> Connection:
    conn = connect(database_url("owner"))
    conn.cursor_factory = Recording
    return conn


def _scans(db: Connection, statement: bytes, table: str, *, seqscan: bool = False
           ) -> list[dict[str, Any]]:
    """The plan nodes that read `table` when `statement` runs under EXPLAIN ANALYZE (rolled
    back: an UPDATE changes nothing), sequential scans priced out unless `seqscan`."""
    with db.cursor() as cur:
        plan = analyzed(cur, statement, seqscan=seqscan)
    return [node for node in nodes(plan) if node.get("Relation Name") == table]


def _discarded_rows(db: Connection, statement: bytes, table: str) -> tuple[int, list[str]]:
    """Rows of `table` read and filtered away by `statement`, and the scans it used."""
    nodes = _scans(db, statement, table)
    return (sum(int(n.get("Rows Removed by Filter", 0)) for n in nodes),
            [f"{n['Node Type']} {n.get('Index Name', '')}".strip() for n in nodes])


@pytest.fixture
def network(db: Connection) -> Iterator[str]:
    """A network with SETTLED final deposits, one crediting and one reversing."""
    net = unique("net")
    states = ["final"] * SETTLED + UNSETTLED
    with db.cursor() as cur:
        for i, state in enumerate(states):
            cur.execute(
                "INSERT INTO chain_deposits (event_id, network, tx_hash, block_number,"
                " recipient, raw_value, chain, user_id, asset, amount, trace_id, state,"
                " credited_at) VALUES (%s, %s, %s, %s, '0xr', 1, '{}', 'u', 'A', 1, 't', %s,"
                " CASE WHEN %s = 'reversing' THEN now() END)",
                (f"{net}-{i}", net, f"0x{i:064x}", i, state, state))
        cur.execute("ANALYZE chain_deposits")
    yield net
    with db.cursor() as cur:
        cur.execute("DELETE FROM chain_deposits WHERE network = %s", (net,))


def test_the_finality_watchers_reads_skip_settled_deposits(db: Connection, network: str
                                                            ) -> None:
    SENT.clear()
    store = ChainDepositStore(_recording_connection)
    try:
        # Real answers first: the settled history is not counted.
        assert store.backlog(network)[0] == 1
        assert store.credited_count(network) == 1
        assert list(store.due(network, 10**9, 100)) == []
        assert store.credited(network, 100) == []
    finally:
        store.close()
    assert len(SENT) == 4
    for statement in SENT:
        discarded, scans = _discarded_rows(db, statement, "chain_deposits")
        # An unsettled deposit of another state may be read and filtered; history not.
        assert discarded <= len(UNSETTLED), (statement, scans, discarded)


def test_a_users_deposit_addresses_are_read_by_user(db: Connection) -> None:
    owner, other = unique("addr-u").lower(), unique("addr-o").lower()
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s), (%s)", (owner, other))
        cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                    " SELECT 'ethereum', %s || g, %s FROM generate_series(1, 300) g",
                    (f"0x{other}-", other))
        cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                    " VALUES ('ethereum', %s, %s)", (f"0x{owner}", owner))
        cur.execute("ANALYZE deposit_addresses")
    conn = _recording_connection()
    try:
        SENT.clear()
        with conn, conn.cursor() as cur:
            found = user_rows.addresses(cur, owner)
    finally:
        conn.close()
    assert [a.address for a in found] == [f"0x{owner}"]
    discarded, scans = _discarded_rows(db, SENT[-1], "deposit_addresses")
    assert discarded == 0 and not any(s.startswith("Seq Scan") for s in scans), scans


def _rows_read(db: Connection, statement: bytes, table: str) -> int:
    """Rows of `table` that `statement`'s scans returned (before any sort or limit), as
    the planner chose them."""
    return sum(int(n["Actual Rows"]) * int(n["Actual Loops"])
               for n in _scans(db, statement, table, seqscan=True))


def test_a_history_page_reads_a_page_not_the_whole_history(db: Connection, ledger_db
                                                           ) -> None:
    """300 transfers: the first page and one from the middle each read about a page of
    postings (at most a page per account, then the page's own), never all 300."""
    user = unique("hist-u")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    events = [PaymentEvent(f"{user}-d{i}", EventType.DEPOSIT, user, "USD", Decimal(i + 1),
                           "payments") for i in range(300)]
    with db.cursor() as cur:
        store_events(cur, events)
    result = ledger_apply(ledger_db.connection(),
                          [record_of(wire_message(e), offset=i) for i, e in enumerate(events)])
    assert not result.dead_letters
    conn = _recording_connection()
    try:
        pages = []
        for before in (None, "middle"):
            SENT.clear()
            with conn, conn.cursor() as cur:
                # The middle: 150 transfers below where the first page ended.
                cursor = None if before is None else reads.parse_cursor(pages[0][1]) - 150
                pages.append(reads.transactions(cur, user, cursor, 10))
            page_rows = _rows_read(db, SENT[-1], "postings")
            # limit + 1 rows per account at most, then the page's two postings a transfer
            assert page_rows <= 11 * 3 + 11 * 2, page_rows
    finally:
        conn.close()
    first, middle = pages[0][0], pages[1][0]
    assert [i["event_id"] for i in first] == [f"{user}-d{i}" for i in range(299, 289, -1)]
    assert len(middle) == 10 and all(i["transfer_id"] < first[-1]["transfer_id"] - 140
                                     for i in middle)


def test_failed_deliveries_are_found_without_reading_the_delivered(db: Connection) -> None:
    """`notifications list --state failed` and `recover` (migration 0018), next to 300
    deliveries that succeeded."""
    user = unique("ntf-fail").lower()
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    endpoint_id, _ = add_endpoint("http://127.0.0.1:9/never", user)
    try:
        with db.cursor() as cur:
            for i in range(301):
                intent_id = "ntf_" + uuid.uuid4().hex
                cur.execute("INSERT INTO notification_intents (intent_id, type, user_id,"
                            " created_at, data) VALUES (%s, 'deposit.credited', %s, now(),"
                            " '{}')", (intent_id, user))
                cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id,"
                            " state) VALUES (%s, %s, %s)",
                            (intent_id, endpoint_id, "failed" if i == 0 else "delivered"))
            cur.execute("ANALYZE notification_deliveries")
        conn = _recording_connection()
        try:
            SENT.clear()
            with conn, conn.cursor() as cur:
                failed = operator.list_slots(cur, user_id=None, state="failed", limit=50)
                cur.execute("SELECT now() - interval '1 hour'")
                since = cur.fetchone()[0]
                conn.rollback()  # recover is run again below, under EXPLAIN, rolled back
            with conn, conn.cursor() as cur:
                assert operator.recover(cur, since, endpoint_id) == 1
                conn.rollback()
        finally:
            conn.close()
        assert endpoint_id in {s.endpoint_id for s in failed}
        with db.cursor() as cur:  # other tests' failed deliveries may be read, and filtered
            cur.execute("SELECT count(*) FROM notification_deliveries WHERE state = 'failed'")
            failed_anywhere = cur.fetchone()[0]
        for statement in (SENT[0], SENT[-1]):
            discarded, scans = _discarded_rows(db, statement, "notification_deliveries")
            assert discarded < failed_anywhere and not any(
                s.startswith("Seq Scan") for s in scans), (statement, scans, discarded)
    finally:
        with db.cursor() as cur:
            cur.execute("UPDATE notification_endpoints SET disabled_at = now()"
                        " WHERE endpoint_id = %s", (endpoint_id,))
