"""Migration 0008 on a populated v1 database (docs/ledger.md#migrating-a-v1-database): the
single-sided journals become transfers against an opening-balance account (gateway money)
and custody (chain deposits), every balance is kept, reconcile is clean, history is kept
for balances at a point in time, and the v2 ledger carries on from there.

A scratch database of its own, built with the migrations up to 0007 and filled the way
the v1 ledger left its tables (the story of each user below), so the test never touches
the shared test database's books.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest

from paystream.consumers.ledger.reconcile import reconcile
from paystream.ops import users as admin
from paystream.schema.db import Connection, PostgresAddress, connect
from paystream.schema.events import EventType, PaymentEvent
from paystream.schema.migrate import apply_pending, migration_files
from tests.support.consumers import record_of, store_events, wire_message
from tests.support.ids import unique
from tests.support.ledger import ledger_apply
from tests.support.migrations import database_at

ETH = "ETH_MAINNET:native"
T0 = "2026-11-01 10:00:00+00"
# The v1 state, as the v1 ledger wrote it: (user, asset, available, pending), its journal
# rows (source event, event type, user, asset, delta, created_at) per book, and the
# chain deposits with their end state.
V1_SQL = f"""
INSERT INTO users (user_id) VALUES ('alice'), ('bob'), ('carol'), ('dave'), ('erin'),
    ('frank');
INSERT INTO balances (user_id, asset, balance, pending) VALUES
    ('alice', 'USD', 69, 0),      -- deposit 100, withdrawal 30, fee 1
    ('bob', '{ETH}', 2, 0),       -- chain deposit 2, final
    ('carol', '{ETH}', 0, 1.5),   -- chain deposit 1.5, still pending
    ('dave', '{ETH}', 0, 0),      -- credited 1, withdrew 0.7, reversed: took 0.3, owes 0.7
    ('erin', '{ETH}', 0, 0),      -- chain deposit 1, reorged before finality
    ('frank', '{ETH}', 0, 0);     -- credited 1, withdrew 1, reversed: took 0, owes 1
INSERT INTO balance_events (source_event_id, event_type, user_id, asset, delta, created_at)
VALUES
    ('a1', 'deposit', 'alice', 'USD', 100, '{T0}'),
    ('a2', 'withdrawal', 'alice', 'USD', -30, '{T0}'::timestamptz + interval '1 hour'),
    ('a3', 'withdrawal_fee', 'alice', 'USD', -1, '{T0}'::timestamptz + interval '2 hours'),
    ('b1:finalized', 'deposit_finalized', 'bob', '{ETH}', 2, '{T0}'),
    ('d1:credited', 'deposit_credited', 'dave', '{ETH}', 1, '{T0}'),
    ('d2', 'withdrawal', 'dave', '{ETH}', -0.7, '{T0}'),
    ('d1:reversed', 'deposit_reversed', 'dave', '{ETH}', -0.3, '{T0}'),
    ('f1:credited', 'deposit_credited', 'frank', '{ETH}', 1, '{T0}'),
    ('f2', 'withdrawal', 'frank', '{ETH}', -1, '{T0}');
INSERT INTO pending_events (source_event_id, event_type, user_id, asset, delta, created_at)
VALUES
    ('b1', 'deposit', 'bob', '{ETH}', 2, '{T0}'),
    ('b1:finalized', 'deposit_finalized', 'bob', '{ETH}', -2, '{T0}'),
    ('c1', 'deposit', 'carol', '{ETH}', 1.5, '{T0}'),
    ('d1', 'deposit', 'dave', '{ETH}', 1, '{T0}'),
    ('d1:credited', 'deposit_credited', 'dave', '{ETH}', -1, '{T0}'),
    ('e1', 'deposit', 'erin', '{ETH}', 1, '{T0}'),
    ('e1:reorged', 'deposit_reorged', 'erin', '{ETH}', -1, '{T0}'),
    ('f1', 'deposit', 'frank', '{ETH}', 1, '{T0}'),
    ('f1:credited', 'deposit_credited', 'frank', '{ETH}', -1, '{T0}');
INSERT INTO chain_deposits (event_id, network, tx_hash, block_number, recipient, raw_value,
    chain, user_id, asset, amount, trace_id, state, credited_at) VALUES
    ('b1', 'ETH_MAINNET', '0xb1', 1, '0x01', 2, '{{}}', 'bob', '{ETH}', 2, 't', 'final', NULL),
    ('c1', 'ETH_MAINNET', '0xc1', 1, '0x01', 1, '{{}}', 'carol', '{ETH}', 1.5, 't', 'pending',
     NULL),
    ('d1', 'ETH_MAINNET', '0xd1', 1, '0x01', 1, '{{}}', 'dave', '{ETH}', 1, 't', 'reversed',
     '{T0}'),
    ('e1', 'ETH_MAINNET', '0xe1', 1, '0x01', 1, '{{}}', 'erin', '{ETH}', 1, 't', 'reorged',
     NULL),
    ('f1', 'ETH_MAINNET', '0xf1', 1, '0x01', 1, '{{}}', 'frank', '{ETH}', 1, 't', 'reversed',
     '{T0}');
INSERT INTO account_shortfalls (user_id, asset, source_event_id, deposit_event_id, amount)
VALUES ('dave', '{ETH}', 'd1:reversed', 'd1', 0.7), ('frank', '{ETH}', 'f1:reversed', 'f1', 1);
"""


@pytest.fixture
def v1_database() -> Iterator[PostgresAddress]:
    """A scratch database at migration 0007 holding the v1 story; dropped afterwards."""
    with database_at("0007_roles", V1_SQL) as address:
        yield address


def _rows(conn: Connection, sql: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def test_a_populated_v1_database_migrates_and_reconciles_clean(v1_database) -> None:
    owner = connect(v1_database.dsn("owner"))
    owner.autocommit = True
    try:
        before = _rows(owner, "SELECT user_id, asset, balance, pending FROM balances"
                              " ORDER BY 1, 2")
        # 0008 and every migration after it.
        applied = apply_pending(owner)
        assert applied[0] == "0008_double_entry"
        assert applied == [n for n, _ in migration_files() if n > "0007_roles"]
        # Every balance is kept, and now has its accounts, whose postings say the same.
        assert _rows(owner, "SELECT user_id, asset, balance, pending FROM balances"
                            " ORDER BY 1, 2") == before
        report = reconcile(owner)
        assert report.clean, (report.mismatches, report.transfer_problems, report.custody)
        assert report.balances_checked == 6
        # One transfer per v1 (source event, type), plus the reversal that took nothing.
        assert report.transfers_checked == 16
        accounts = dict(((k, o, a), total) for k, o, a, total in _rows(
            owner, "SELECT a.kind, a.owner, a.asset, coalesce(sum(p.amount), 0)"
                   " FROM accounts a LEFT JOIN postings p USING (account_id)"
                   " WHERE a.kind NOT IN ('available', 'pending', 'held')"
                   " GROUP BY 1, 2, 3"))
        # Gateway money came from the opening balance; custody holds bob's and carol's
        # deposits (dave's and frank's were reversed, erin's reorged); the receivable is
        # what the two reversals could not take.
        assert accounts == {("opening", "platform", "USD"): Decimal(-69),
                            ("opening", "platform", ETH): Decimal("1.7"),
                            ("custody", "ETH_MAINNET", ETH): Decimal("-3.5"),
                            ("receivable", "platform", ETH): Decimal("-1.7")}
        # The old journals are gone; their history is in the statement view.
        assert _rows(owner, "SELECT to_regclass('balance_events'),"
                            " to_regclass('pending_events')") == [(None, None)]
        assert _rows(owner, "SELECT source_event_id, delta FROM user_entries WHERE"
                            " user_id = 'alice' ORDER BY created_at") == [
            ("a1", Decimal(100)), ("a2", Decimal(-30)), ("a3", Decimal(-1))]
    finally:
        owner.close()

    ops = connect(v1_database.dsn("ops"))
    try:
        # History kept: alice's balance an hour and a half after her deposit.
        at = admin.balances(ops, "alice", at=_moment("2026-11-01T11:30:00+00:00"))
        assert [(r.asset, r.balance) for r in at] == [("USD", Decimal(70))]
    finally:
        ops.close()

    # The v2 ledger carries on from the migrated books, as its own role.
    ledger = connect(v1_database.dsn("ledger"))
    owner = connect(v1_database.dsn("owner"))
    owner.autocommit = True
    try:
        event = PaymentEvent(unique("a4"), EventType.WITHDRAWAL, "alice", "USD",
                             Decimal(9), "payments")
        with owner.cursor() as cur:
            store_events(cur, [event])
        result = ledger_apply(ledger, [record_of(wire_message(event))])
        assert result.outcomes["applied"] == 1
        assert _rows(owner, "SELECT balance FROM balances WHERE user_id = 'alice'") == \
            [(Decimal(60),)]
        assert reconcile(owner).clean
    finally:
        ledger.close()
        owner.close()


def _moment(text: str):
    from datetime import datetime
    return datetime.fromisoformat(text)


def test_reconcile_finds_an_unbalanced_transfer_and_custody_out_of_line(v1_database) -> None:
    owner = connect(v1_database.dsn("owner"))
    owner.autocommit = True
    try:
        apply_pending(owner)
        assert reconcile(owner).clean
        with owner.cursor() as cur:
            # Money out of nowhere: a third posting on alice's deposit, to the fees account.
            cur.execute("INSERT INTO accounts (kind, owner, asset) VALUES"
                        " ('fees', 'platform', 'USD') RETURNING account_id")
            fees = cur.fetchone()[0]
            cur.execute("INSERT INTO postings (transfer_id, account_id, asset, amount)"
                        " SELECT transfer_id, %s, 'USD', 5 FROM transfers"
                        " WHERE source_event_id = 'a1'", (fees,))
            # A posting whose account is in another asset than the posting says.
            cur.execute("INSERT INTO postings (transfer_id, account_id, asset, amount)"
                        " SELECT transfer_id, %s, 'EUR', -5 FROM transfers"
                        " WHERE source_event_id = 'a2'", (fees,))
            # A deposit held on the chain that custody never received.
            cur.execute("INSERT INTO chain_deposits (event_id, network, tx_hash, block_number,"
                        " recipient, raw_value, chain, user_id, asset, amount, trace_id)"
                        " VALUES ('g1', 'ETH_MAINNET', '0xg1', 1, '0x01', 1, '{}', 'carol',"
                        " %s, 0.25, 't')", (ETH,))
        report = reconcile(owner)
        problems = {(p.problem, p.asset, p.detail) for p in report.transfer_problems}
        assert ("unbalanced", "USD", "postings sum to 5") in problems
        assert ("asset_differs", "EUR", f"account {fees} is in USD") in problems
        assert ("asset_not_zero", "USD", "all postings sum to 5") in problems
        assert [(c.network, c.asset, c.books, c.deposits, c.problem) for c in report.custody] \
            == [("ETH_MAINNET", ETH, Decimal("3.5"), Decimal("3.75"), "custody_differs")]
        # The chain hook: less on chain than the books say is a mismatch of its own.
        fixed = reconcile(owner, chain=lambda network, asset: Decimal(3))
        assert [(c.on_chain, c.problem) for c in fixed.custody] == [(Decimal(3),
                                                                     "custody_differs")]
        # Only alice's transfers are in scope for her: none of the custody checks.
        scoped = reconcile(owner, users=["alice"])
        assert {p.problem for p in scoped.transfer_problems} == {"unbalanced", "asset_differs"}
        assert scoped.custody == [] and not scoped.clean
        assert reconcile(owner, users=["bob"]).clean
    finally:
        owner.close()


def test_the_chain_hook_reports_custody_the_chain_does_not_hold(v1_database) -> None:
    owner = connect(v1_database.dsn("owner"))
    owner.autocommit = True
    try:
        apply_pending(owner)
        # The books agree with the deposits (3.5), but the addresses hold less on chain.
        short = reconcile(owner, chain=lambda network, asset: Decimal("3.4"))
        assert [(c.books, c.deposits, c.on_chain, c.problem) for c in short.custody] == [
            (Decimal("3.5"), Decimal("3.5"), Decimal("3.4"), "short_on_chain")]
        # More on chain is no mismatch (an address may hold what was never a deposit), and
        # a hook that cannot tell (None) is no mismatch either.
        assert reconcile(owner, chain=lambda network, asset: Decimal(4)).clean
        assert reconcile(owner, chain=lambda network, asset: None).clean
    finally:
        owner.close()
