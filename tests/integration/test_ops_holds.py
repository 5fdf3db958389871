"""The hold expiry scheduler and the operator's adjust / revert
(docs/ledger.md#holds-two-phase-withdrawals): each writes its event as the ingest does
(payment_events + outbox, one transaction), claimed before it is written, once; the ledger
then applies it like any other."""

from __future__ import annotations

import subprocess
from decimal import Decimal
from itertools import count
from pathlib import Path

from paystream.consumers.ledger.operator_events import expire_holds
from paystream.launch import paystream_argv
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.events import EventType, PaymentEvent, parse_wire
from tests.support.consumers import record_of, store_events, wire_message
from tests.support.ids import unique
from tests.support.ledger import ledger_apply

ROOT = Path(__file__).resolve().parents[2]
_offsets = count(1_000)


def paystream(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(paystream_argv(*args), cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def _one(db: Connection, sql: str, *params: object) -> tuple:
    with db.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()


def _apply_stored(db: Connection, ledger: Connection, event_id: str) -> dict[str, int]:
    """Hand the ledger the record the outbox would carry for a stored event."""
    (payload,) = _one(db, "SELECT payload FROM payment_events WHERE event_id = %s", event_id)
    result = ledger_apply(ledger, [record_of(wire_message(parse_wire(payload)),
                                             offset=next(_offsets))])
    assert not result.dead_letters, result.dead_letters
    return {k: n for k, n in result.outcomes.items() if n}


def _held_user(db: Connection, ledger: Connection, amount: str = "40") -> tuple[str, str]:
    user = unique("exp-u")
    deposit = PaymentEvent(unique("exp-dep"), EventType.DEPOSIT, user, "USD", Decimal(100),
                           "payments")
    request = PaymentEvent(unique("exp-req"), EventType.WITHDRAWAL_REQUESTED, user, "USD",
                           Decimal(amount), "payments")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        store_events(cur, [deposit, request])
    ledger_apply(ledger, [record_of(wire_message(e), offset=next(_offsets))
                          for e in (deposit, request)])
    return user, request.event_id


def test_an_expired_hold_is_claimed_once_and_voided_by_the_ledger(db, ledger_db) -> None:
    ledger = ledger_db.connection()
    user, hold_id = _held_user(db, ledger)
    assert _one(db, "SELECT balance, held FROM balances WHERE user_id = %s", user) == \
        (Decimal(60), Decimal(40))
    # Not expired yet: the scheduler leaves it.
    done = paystream("holds", "expire")
    assert done.returncode == 0, done.stderr
    assert _one(db, "SELECT state FROM holds WHERE hold_id = %s", hold_id) == ("held",)

    with db.cursor() as cur:
        cur.execute("UPDATE holds SET expires_at = now() - interval '1 second'"
                    " WHERE hold_id = %s", (hold_id,))
    # A round that does not commit leaves nothing behind: no claim, no event.
    scratch = connect(database_url("ops"))
    try:
        with scratch.cursor() as cur:
            assert hold_id in [w.event.reference for w in expire_holds(cur)]
        scratch.rollback()
    finally:
        scratch.close()
    assert _one(db, "SELECT state FROM holds WHERE hold_id = %s", hold_id) == ("held",)
    expired_id = f"sys:hold-expired:{hold_id}"
    assert _one(db, "SELECT count(*) FROM payment_events WHERE event_id = %s",
                expired_id) == (0,)

    done = paystream("holds", "expire")
    assert done.returncode == 0 and "voided" in done.stdout, done.stdout + done.stderr
    assert _one(db, "SELECT state FROM holds WHERE hold_id = %s", hold_id) == ("expiring",)
    assert _one(db, "SELECT event_type, status FROM payment_events"
                " JOIN event_status USING (event_id) WHERE event_id = %s",
                expired_id) == ("hold_expired", "received")
    # A second round (or a restarted scheduler) finds it claimed: no second event.
    paystream("holds", "expire")
    assert _one(db, "SELECT count(*) FROM payment_events WHERE event_id LIKE %s",
                f"%expired%{hold_id}") == (1,)

    assert _apply_stored(db, ledger, expired_id) == {"applied": 1}
    assert _one(db, "SELECT state FROM holds WHERE hold_id = %s", hold_id) == ("expired",)
    assert _one(db, "SELECT balance, held FROM balances WHERE user_id = %s", user) == \
        (Decimal(100), Decimal(0))


def test_a_settlement_that_beats_the_expiry_wins_and_the_expiry_moves_nothing(
        db, ledger_db) -> None:
    ledger = ledger_db.connection()
    user, hold_id = _held_user(db, ledger, "30")
    with db.cursor() as cur:
        cur.execute("UPDATE holds SET expires_at = now() - interval '1 second'"
                    " WHERE hold_id = %s", (hold_id,))
    assert paystream("holds", "expire").returncode == 0  # claimed: expiring
    settle = PaymentEvent(unique("exp-settle"), EventType.WITHDRAWAL_SETTLED, user, "USD",
                          Decimal(30), "payments", reference=hold_id)
    with db.cursor() as cur:
        store_events(cur, [settle])
    assert ledger_apply(ledger, [record_of(wire_message(settle), offset=next(_offsets))]) \
        .outcomes["applied"] == 1
    # The gateway paid it: the late expiry is refused, nothing moves twice.
    assert _apply_stored(db, ledger, f"sys:hold-expired:{hold_id}") == {"hold_not_open": 1}
    assert _one(db, "SELECT state FROM holds WHERE hold_id = %s", hold_id) == ("settled",)
    assert _one(db, "SELECT balance, held FROM balances WHERE user_id = %s", user) == \
        (Decimal(70), Decimal(0))


def test_adjust_is_one_event_per_key_and_refuses_what_it_cannot_do(db, ledger_db) -> None:
    ledger = ledger_db.connection()
    user, _ = _held_user(db, ledger, "1")
    key = unique("adj")
    args = ("adjust", "--user", user, "--asset", "USD", "--reason", "goodwill",
            "--idempotency-key", key)
    first = paystream(*args, "--amount", "+2.5")
    assert first.returncode == 0 and "recorded" in first.stdout, first.stderr
    again = paystream(*args, "--amount", "2.5")
    assert again.returncode == 0 and "already recorded" in again.stdout
    other = paystream(*args, "--amount", "3")
    assert other.returncode == 1 and "other content" in other.stderr
    assert paystream(*args[:-1], unique("k"), "--amount", "abc").returncode == 2
    assert paystream(*args[:-1], unique("k"), "--amount", "0").returncode == 2
    nobody = paystream("adjust", "--user", unique("nobody"), "--asset", "USD", "--amount",
                       "1", "--reason", "x", "--idempotency-key", unique("k"))
    assert nobody.returncode == 1 and "does not exist" in nobody.stderr
    assert _apply_stored(db, ledger, f"op:adjust:{key}") == {"applied": 1}
    assert _one(db, "SELECT balance FROM balances WHERE user_id = %s", user) == \
        (Decimal("101.5"),)


def test_revert_takes_back_what_is_left_of_an_event_once(db, ledger_db) -> None:
    ledger = ledger_db.connection()
    user = unique("rev-u")
    deposit = PaymentEvent(unique("rev-dep"), EventType.DEPOSIT, user, "USD", Decimal(10),
                           "payments")
    refund = PaymentEvent(unique("rev-ref"), EventType.REFUND, user, "USD", Decimal(4),
                          "payments", reference=deposit.event_id)
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        store_events(cur, [deposit, refund])
    ledger_apply(ledger, [record_of(wire_message(e), offset=next(_offsets))
                          for e in (deposit, refund)])
    done = paystream("revert", deposit.event_id, "--reason", "sent to the wrong user")
    assert done.returncode == 0, done.stderr
    assert "revert of 6 USD" in done.stdout  # what the refund left
    assert _apply_stored(db, ledger, f"op:revert:{deposit.event_id}") == {"applied": 1}
    assert _one(db, "SELECT balance FROM balances WHERE user_id = %s", user) == (Decimal(0),)
    nothing = paystream("revert", deposit.event_id, "--reason", "again")
    assert nothing.returncode == 1 and "reversed in full" in nothing.stderr
    unknown = paystream("revert", unique("no-such"), "--reason", "x")
    assert unknown.returncode == 1 and "no event" in unknown.stderr
