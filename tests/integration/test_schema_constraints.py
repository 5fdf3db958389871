"""The migrations and the constraints that carry correctness, on the real Postgres."""

from __future__ import annotations

from decimal import Decimal

import psycopg2
import pytest

from paystream.schema.db import database_url
from paystream.schema.idempotency import idempotency_key
from paystream.schema.migrate import apply_migrations, migration_files
from tests.support.ids import unique
from tests.support.ledger import plant_transfer


def test_rerunning_migrations_applies_nothing(db):
    assert apply_migrations(database_url("owner")) == []
    with db.cursor() as cur:
        cur.execute("SELECT name FROM schema_migrations ORDER BY name")
        assert [r[0] for r in cur.fetchall()] == [name for name, _ in migration_files()]


def test_publication_and_slot_exist(db):
    with db.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_publication_tables"
                    " WHERE pubname = 'paystream_outbox' ORDER BY tablename")
        assert [r[0] for r in cur.fetchall()] == ["debezium_heartbeat", "outbox"]
        cur.execute("SELECT plugin FROM pg_replication_slots"
                    " WHERE slot_name = 'paystream_outbox'")
        assert cur.fetchone() == ("pgoutput",)


def _fails(db, sql: str, params: tuple) -> str:
    with db.cursor() as cur, pytest.raises(psycopg2.Error) as info:
        cur.execute(sql, params)
    return info.value.pgcode


def test_constraints_that_protect_money(db):
    user, source = unique("u"), unique("e")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        cur.execute("INSERT INTO balances (user_id, asset, balance) VALUES (%s, 'USD', 5)",
                    (user,))
        cur.execute("INSERT INTO balances (user_id, asset, balance) VALUES (%s, 'ETH', 1)",
                    (user,))  # per (user, asset): another asset is another row
        plant_transfer(cur, source, "deposit", user, "USD", Decimal(5))
    # balance >= 0
    assert _fails(db, "UPDATE balances SET balance = -0.000000000000000001"
                  " WHERE user_id = %s AND asset = 'USD'", (user,)) == "23514"
    # one transfer per (source event, event type)
    assert _fails(db, "INSERT INTO transfers (source_event_id, event_type)"
                  " VALUES (%s, 'deposit')", (source,)) == "23505"
    # a transfer posts to an account once; a posting moves money (never 0)
    with db.cursor() as cur:
        cur.execute("SELECT transfer_id, account_id FROM postings JOIN transfers"
                    " USING (transfer_id) WHERE source_event_id = %s LIMIT 1", (source,))
        transfer_id, account_id = cur.fetchone()
    assert _fails(db, "INSERT INTO postings (transfer_id, account_id, asset, amount)"
                  " VALUES (%s, %s, 'USD', 1)", (transfer_id, account_id)) == "23505"
    assert _fails(db, "INSERT INTO postings (transfer_id, account_id, asset, amount)"
                  " VALUES (%s, -1, 'USD', 0)", (transfer_id,)) == "23514"
    # held >= 0 (withdrawals in flight)
    assert _fails(db, "UPDATE balances SET held = -1 WHERE user_id = %s AND asset = 'USD'",
                  (user,)) == "23514"
    # an account is one of the kinds the ledger knows
    assert _fails(db, "INSERT INTO accounts (kind, owner, asset) VALUES ('cash', %s, 'USD')",
                  (user,)) == "23514"
    # status is one of the lifecycle's values
    assert _fails(db, "WITH e AS (INSERT INTO payment_events (event_id, provider, event_type,"
                  " user_id, asset, amount, content_hash, trace_id, payload) VALUES"
                  " (%s, 'p', 'deposit', %s, 'USD', 1, 'h', 't', '{}') RETURNING event_id)"
                  " INSERT INTO event_status (event_id, status) SELECT event_id, 'pending'"
                  " FROM e", (unique("e"), user)) == "23514"
    # ... and the status of an event that was recorded
    assert _fails(db, "INSERT INTO event_status (event_id) VALUES (%s)",
                  (unique("e"),)) == "23503"
    # NUMERIC(38,18): 10^20 does not fit
    assert _fails(db, "UPDATE balances SET balance = 100000000000000000000"
                  " WHERE user_id = %s AND asset = 'USD'", (user,)) == "22003"


def test_an_idempotency_key_is_claimed_once_by_the_table_itself(db):
    """processed_events keeps one row per key without a primary key (migration 0020: an
    exclusion constraint over a hash index; 0047: one in each day's partition, and every
    claim of one event carries its day): a second row of a key fails whichever statement
    inserts it, a lookup by key reads each partition's index, and other keys pass."""
    key = idempotency_key(unique("claim"), "deposit")
    other = idempotency_key(unique("claim"), "deposit")
    insert = ("INSERT INTO processed_events (idempotency_key, event_id, event_type, outcome,"
              " event_day) VALUES (%s, 'e', 'deposit', 'applied',"
              " (now() AT TIME ZONE 'UTC')::date + 3)")  # a day's partition, made ahead
    with db.cursor() as cur:
        cur.execute(insert, (key,))
    assert _fails(db, insert, (key,)) == "23P01"  # exclusion_violation
    with db.cursor() as cur:
        cur.execute(insert, (other,))
        cur.execute(insert + " ON CONFLICT DO NOTHING RETURNING 1", (key,))
        assert cur.fetchall() == []
        cur.execute("SELECT count(*) FROM pg_inherits"
                    " WHERE inhparent = 'processed_events'::regclass")
        partitions = cur.fetchone()[0]
        assert partitions >= 3  # legacy, default, and the days made ahead
        cur.execute("SET enable_seqscan = off")  # a test database may be small
        cur.execute("EXPLAIN SELECT outcome FROM processed_events WHERE idempotency_key = %s",
                    (key,))
        plan = " ".join(row[0] for row in cur.fetchall())
        cur.execute("RESET enable_seqscan")
        assert plan.count("_key_once") == partitions and "Seq Scan" not in plan, plan
        cur.execute("SELECT count(*) FROM processed_events WHERE idempotency_key IN (%s, %s)",
                    (key, other))
        assert cur.fetchone() == (2,)
        cur.execute("DELETE FROM processed_events WHERE idempotency_key IN (%s, %s)",
                    (key, other))


@pytest.mark.parametrize(("table", "column", "others", "good", "bad"), [
    ("processed_events", "idempotency_key",
     "event_id, event_type, outcome) VALUES (%s, 'e', 'deposit', 'applied')",
     "0123456789abcdef" * 4,
     ["0123456789abcdef" * 4 + "0", "0123456789abcdef" * 4 + "\n", "0123456789ABCDEF" * 4,
      "0123456789abcdeg" * 4, "0123456789abcdef" * 3 + "0123456789abcde", ""]),
    ("notification_intents", "intent_id",
     "type, user_id, created_at, data) VALUES (%s, 't', 'u', now(), '{}')",
     "ntf_" + "0123456789abcdef" * 2,
     ["ntf_" + "0123456789abcdef" * 2 + "0", "ntf_" + "0123456789abcdeF" * 2,
      "ntf_" + "0123456789abcdef" * 2 + "\n", "ntx_" + "0123456789abcdef" * 2,
      "ntf_" + "0123456789abcdef" + "0123456789abcde"]),
])
def test_key_shapes_are_enforced_exactly(db, table, column, others, good, bad):
    """Migration 0014 rewrote these CHECKs for speed (length + an unbounded class instead
    of a bounded repeat): the same keys pass, the same ones fail."""
    insert = f"INSERT INTO {table} ({column}, {others}"
    for key in bad:
        assert _fails(db, insert, (key,)) == "23514", key
    with db.cursor() as cur:
        cur.execute(f"DELETE FROM {table} WHERE {column} = %s", (good,))
        cur.execute(insert, (good,))
        cur.execute(f"DELETE FROM {table} WHERE {column} = %s", (good,))
