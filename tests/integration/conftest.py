"""Fixtures of the integration tests, and their `integration` marker.

Integration tests never skip: a missing service fails the test, with the command that
starts it (`paystream stack up`, which `make test` runs first). Helpers that are not
fixtures live in tests/support/.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg2
import pytest

from paystream.chaos.receiver import LOOPBACK_ENV
from paystream.consumers.connection import Database
from paystream.schema.db import Connection, connect, database_url, where
from tests.support.chain.node import AnvilUnavailableError, Chain, Token, running_anvil
from tests.support.chain.pipeline import Pipeline, wait_for
from tests.support.chain.scanning import cursor, start_scanner
from tests.support.consumers import ProcessPool
from tests.support.topics import TopicReader

HERE = Path(__file__).resolve().parent

# The tests' webhook receivers listen on this machine over http: the notifiers and the
# `endpoints add` commands they start admit loopback and http (the SSRF guard refuses
# both by default; tests/integration/test_notify_ssrf.py runs it without this).
os.environ.update(LOOPBACK_ENV)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/integration/ needs the real stack: mark it here, once,
    so `-m 'not integration'` selects exactly the unit tests. (pytest calls this hook
    with the whole session's items, hence the path check.)"""
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def db() -> Iterator[Connection]:
    """An autocommit connection to the stack's Postgres; fails if it is not running."""
    try:
        conn = connect(database_url("owner"))
    except psycopg2.OperationalError as exc:
        pytest.fail(f"Postgres is not reachable at {where(database_url('owner'))} ({exc}); "
                    "run `paystream stack up` (make test does)")
    conn.autocommit = True
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
def topic_reader() -> Iterator[Callable[[str], TopicReader]]:
    """Factory: `reader = topic_reader("paystream.payments")`; closed after the test."""
    readers: list[TopicReader] = []

    def make(topic: str) -> TopicReader:
        reader = TopicReader(topic)
        readers.append(reader)
        return reader

    yield make
    for reader in readers:
        reader.close()


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[ProcessPool]:
    """Consumer processes started by a test; all killed when it ends."""
    p = ProcessPool(tmp_path)
    yield p
    p.kill_all()


@pytest.fixture
def ledger_db() -> Iterator[Database]:
    """The consumer's own kind of connection (autocommit off, its timeouts)."""
    database = Database(application_name="paystream-test-ledger")
    try:
        database.connection()
    except psycopg2.OperationalError as exc:
        pytest.fail(f"Postgres is not reachable ({exc}); run `paystream stack up`")
    yield database
    database.close()


# -- the chain tests: a module of them shares one anvil, one ERC-20 on it (`token`: on the
# module's own `chain` where it defines one, as test_finality_chain.py does), and one
# pipeline with a scanner running (test_chain_scanner.py, test_chain_reconcile.py).
# A module that defines its own `chain` / `pipe` uses those instead.
SCANNER_ANVIL_PORT = 18653


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    try:
        with running_anvil(SCANNER_ANVIL_PORT, name="anvil-scanner-test") as node:
            yield node
    except AnvilUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def token(chain: Chain) -> Token:
    return chain.deploy_token("PUSD", decimals=6)


@pytest.fixture(scope="module")
def pipe(chain: Chain, token: Token) -> Iterator[Pipeline]:
    with Pipeline(chain) as p:
        start_scanner(p, chain)
        wait_for("the scanner's cursor", lambda: cursor(p) is not None, timeout=30)
        yield p


@pytest.fixture
def endpoints(db: Connection) -> Iterator[list[str]]:
    """The test's endpoint ids, disabled when it ends (others' senders skip them)."""
    made: list[str] = []
    yield made
    with db.cursor() as cur:
        cur.execute("UPDATE notification_endpoints SET disabled_at = now(),"
                    " disabled_reason = 'test over' WHERE endpoint_id = ANY(%s)"
                    " AND disabled_at IS NULL", (made,))
