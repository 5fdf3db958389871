"""paystream behind the stack's transaction-pooling PgBouncer (`stack up --pgbouncer`).

Every process under test runs with PAYSTREAM_DB_VIA_PGBOUNCER=1 and PAYSTREAM_PG_PORT=1:
nothing listens on port 1, so a process that reached Postgres reached it through the
bouncer. What each test checks comes from Postgres or PgBouncer's own admin console,
never from the process under test. The chaos short run goes through it too
(tests/integration/test_chaos.py)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from decimal import Decimal
from pathlib import Path

import httpx
import psycopg2
import pytest

from paystream.consumers.crash_hooks import AFTER_DB_COMMIT
from paystream.launch import paystream_argv
from paystream.schema.db import PostgresAddress, connect
from paystream.stack import pgbouncer
from tests.integration.test_consumer_crash import _committed_total, _processed, _setup
from tests.support.consumers import assert_applied_exactly_once, drained, produce, wire_message
from tests.support.ids import unique
from tests.support.ingest import ingest_server, payment_body, payment_headers
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
VIA_BOUNCER = {"PAYSTREAM_DB_VIA_PGBOUNCER": "1", "PAYSTREAM_PG_PORT": "1"}


@pytest.fixture(scope="module")
def bouncer() -> pgbouncer.PgBouncerConfig:
    cfg = pgbouncer.PgBouncerConfig.from_env()
    try:
        pgbouncer.show(cfg, "VERSION")
    except psycopg2.Error as exc:
        pytest.fail(f"PgBouncer is not serving on :{cfg.port} ({exc}); run `paystream stack"
                    " up --pgbouncer` (make test does, PAYSTREAM_PGBOUNCER=1)")
    return cfg


def _config(cfg: pgbouncer.PgBouncerConfig) -> dict[str, str]:
    return {str(row[0]): str(row[1]) for row in pgbouncer.show(cfg, "CONFIG")}


def _client_users(cfg: pgbouncer.PgBouncerConfig) -> set[str]:
    # SHOW CLIENTS: type, user, database, ...
    return {str(row[1]) for row in pgbouncer.show(cfg, "CLIENTS") if row[2] != "pgbouncer"}


def test_the_bouncer_pools_by_transaction(bouncer) -> None:
    config = _config(bouncer)
    assert config["pool_mode"] == "transaction"
    assert config["listen_addr"] == "127.0.0.1"


def test_each_role_gets_its_server_side_bounds_through_the_bouncer(bouncer) -> None:
    """The consumers' lock and statement timeouts are role defaults: they hold on a
    pooled connection, where a session SET could not."""
    for role, statement, lock in (("ledger", "30s", "10s"), ("ingest", "2s", "2s"),
                                  ("ops", "0", "0")):
        conn = connect(PostgresAddress("127.0.0.1", bouncer.port, "paystream").dsn(role))
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW statement_timeout")
                assert cur.fetchone()[0] == statement, role
                cur.execute("SHOW lock_timeout")
                assert cur.fetchone()[0] == lock, role
        finally:
            conn.close()


def _reconcile(env: dict[str, str], *users: str) -> subprocess.CompletedProcess[str]:
    args = [a for u in users for a in ("--user", u)]
    return subprocess.run(paystream_argv("reconcile", *args), cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def _timeless(report: str) -> str:
    return re.sub(r"\(snapshot at [^)]*\)", "(snapshot)", report)


def test_reconcile_behind_the_bouncer_reports_what_it_reports_direct(bouncer, db) -> None:
    clean, broken = unique("pgb-clean"), unique("pgb-broken")
    with db.cursor() as cur:
        for user in (clean, broken):
            cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        # A balance no posting explains: a mismatch reconcile must report.
        cur.execute("INSERT INTO balances (user_id, asset, balance) VALUES (%s, 'USD', 5)",
                    (broken,))
    direct = _reconcile({}, clean, broken)
    pooled = _reconcile(VIA_BOUNCER, clean, broken)
    assert direct.returncode == 1, direct.stdout + direct.stderr
    assert broken in direct.stdout
    # The same report, but for the snapshot's time.
    assert pooled.returncode == direct.returncode, pooled.stderr
    assert _timeless(pooled.stdout) == _timeless(direct.stdout)
    with db.cursor() as cur:
        cur.execute("DELETE FROM balances WHERE user_id = %s", (broken,))


def test_ledger_consumers_behind_the_bouncer_apply_each_event_once_across_a_crash(
        bouncer, db, pool) -> None:
    topic, group, dlq, events = _setup(db, 1200)
    produce(topic, (wire_message(e) for e in events))
    crashing = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq,
                          extra_args=["--batch-size", "100"],
                          env={**VIA_BOUNCER, AFTER_DB_COMMIT: "2"})
    assert crashing.wait(60) == -9, crashing.tail()
    assert 0 < _committed_total(group, topic) < _processed(db, events)
    survivor = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq, env=VIA_BOUNCER)
    seen: set[str] = set()
    wait_until(lambda: seen.update(_client_users(bouncer)) or drained(group, topic), 90,
               "the survivor to drain the topic")
    assert survivor.terminate() == 0, survivor.tail()
    with db.cursor() as cur:
        assert_applied_exactly_once(cur, events)
    assert "paystream_ledger" in seen  # the bouncer served it (SHOW CLIENTS)


def test_the_ingest_behind_the_bouncer_writes_and_keeps_its_own_timeouts(bouncer, db):
    """Its statement and lock timeouts are SET LOCAL in each transaction: through the
    bouncer a held lock answers 503 after PAYSTREAM_INGEST_DB_STATEMENT_TIMEOUT_MS, it
    never hangs; once the lock is gone the same delivery is written."""
    user = unique("pgb-user")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    env = {**VIA_BOUNCER, "PAYSTREAM_INGEST_DB_STATEMENT_TIMEOUT_MS": "300"}
    with ingest_server(env) as server:
        url = server.url + "/webhooks/payments"
        event_id = unique("pgb-ev")
        body = payment_body(event_id, user, amount="3.5")
        holder = psycopg2.connect(db.dsn)
        try:
            with holder.cursor() as held:
                held.execute("LOCK TABLE payment_events IN EXCLUSIVE MODE")
                started = time.monotonic()
                answer = httpx.post(url, content=body, headers=payment_headers(body),
                                    timeout=30)
                took = time.monotonic() - started
            assert answer.status_code == 503, answer.text
            # Two attempts of 300 ms each: the ingest's own bound, not the role's 2 s
            # default (4 s for two attempts) and not a wait on the lock.
            assert took < 2.5, took
        finally:
            holder.rollback()
            holder.close()
        answer = httpx.post(url, content=body, headers=payment_headers(body), timeout=30)
        assert answer.status_code == 200, answer.text
    with db.cursor() as cur:
        cur.execute("SELECT amount FROM payment_events WHERE event_id = %s", (event_id,))
        assert cur.fetchone()[0] == Decimal("3.5")


def test_the_merchant_api_behind_the_bouncer_reads_and_writes_once(bouncer, db) -> None:
    """The merchant API works behind a transaction-pooling PgBouncer
    (docs/api.md#consistent-reads-behind-pgbouncer): users, addresses, balances, and
    concurrent withdrawals under one Idempotency-Key (its wait on the table's key happens
    inside one pooled transaction) give one event."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.api import api_server, bearer, new_key
    from tests.support.ingest import random_address

    _, key = new_key("read,write")
    user = unique("pgb-api-u")
    with api_server(VIA_BOUNCER, workers=2) as api:
        made = httpx.post(f"{api.url}/v1/users", json={"user_id": user}, headers=bearer(key))
        assert made.status_code == 201, made.text
        added = httpx.post(f"{api.url}/v1/users/{user}/deposit-addresses", headers=bearer(key),
                           json={"network": "ETH_MAINNET", "address": random_address()})
        assert added.status_code == 201, added.text
        shown = httpx.get(f"{api.url}/v1/users/{user}/balances", headers=bearer(key))
        assert shown.status_code == 200 and shown.json()["user_id"] == user, shown.text
        body = {"user_id": user, "asset": "USD", "amount": "2", "destination": "acct-1"}
        headers = {**bearer(key), "Idempotency-Key": unique("pgb-idem")}
        with ThreadPoolExecutor(6) as threads:
            answers = list(threads.map(lambda _: httpx.post(
                f"{api.url}/v1/withdrawals", json=body, headers=headers, timeout=30), range(6)))
        assert {a.status_code for a in answers} == {202}, [a.text for a in answers]
        assert len({a.json()["withdrawal_id"] for a in answers}) == 1
    with db.cursor() as cur:
        cur.execute("SELECT event_type FROM payment_events WHERE user_id = %s", (user,))
        assert cur.fetchall() == [("withdrawal_requested",)]
    # SHOW POOLS: database, user, ...: the API had a pool of its own in the bouncer.
    assert ("paystream", "paystream_api") in {(str(r[0]), str(r[1]))
                                              for r in pgbouncer.show(bouncer, "POOLS")}
