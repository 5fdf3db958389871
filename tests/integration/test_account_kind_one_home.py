"""A new platform account kind touches one home: `rewards`, declared in a test alone
(schema/accounts.py declare_kind), is refused by accounts.kind's CHECK until the migrator
syncs the CHECK with the declarations, then created and found by the ledger's writer of
accounts, as the ledger's role. Afterwards the CHECK is synced back to the shipped kinds,
online (schema/migrate.py, sync_account_kinds), as the event types' is
(test_event_type_one_home.py)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg2.errors
import pytest

from paystream.consumers.connection import Database
from paystream.schema import accounts
from paystream.schema.accounts import AccountKind, AccountRef, declare_kind, retract_kind
from paystream.schema.db import Connection
from paystream.schema.migrate import ACCOUNT_KIND_CHECKS, MigrateSettings, sync_account_kinds
from tests.support.ids import unique
from tests.support.migrations import allowed

FAST = MigrateSettings(PAYSTREAM_MIGRATE_LOCK_TRIES=3, PAYSTREAM_MIGRATE_RETRY_PAUSE_S=0.1)
[(TABLE, _, CONSTRAINT)] = ACCOUNT_KIND_CHECKS


@pytest.fixture
def rewards(db: Connection) -> Iterator[AccountKind]:
    shipped = [k.value for k in AccountKind]
    assert allowed(db, TABLE, CONSTRAINT) == (shipped, True)
    kind = declare_kind("rewards")
    try:
        yield kind
    finally:
        retract_kind(kind)
        with db.cursor() as cur:
            cur.execute("DELETE FROM accounts WHERE kind = 'rewards'")
        assert sync_account_kinds(db, FAST) == [CONSTRAINT]
        assert allowed(db, TABLE, CONSTRAINT) == (shipped, True)


def test_a_kind_declared_in_a_test_alone_is_accepted_once_the_migrator_syncs_it(
        rewards: AccountKind, db: Connection, ledger_db: Database) -> None:
    assert AccountKind("rewards") is rewards and rewards in list(AccountKind)
    assert not rewards.is_user
    account = AccountRef.platform(rewards, unique("RWD"))
    conn = ledger_db.connection()

    # The database refuses it until the migrator syncs the CHECK (once: then in step).
    with conn.cursor() as cur, pytest.raises(psycopg2.errors.CheckViolation):
        accounts.resolve(cur, [account])
    conn.rollback()
    assert sync_account_kinds(db, FAST) == [CONSTRAINT]
    assert sync_account_kinds(db, FAST) == []
    assert allowed(db, TABLE, CONSTRAINT) == ([k.value for k in AccountKind], True)
    assert allowed(db, TABLE, CONSTRAINT)[0][-1] == "rewards"

    # The ledger's writer creates it, then finds it: read back as the declared kind.
    with conn.cursor() as cur:
        created = accounts.resolve(cur, [account])
        found = accounts.resolve(cur, [account])
    conn.commit()
    assert list(created) == [account] and found == created
    assert next(iter(found)).kind is rewards
