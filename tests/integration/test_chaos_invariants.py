"""The chaos checker itself must catch what it claims to: a checker that cannot fail
would make every chaos report a pass."""

from __future__ import annotations

from paystream.chaos.invariants import check
from paystream.chaos.traffic import Kind, Request
from tests.conftest import unique


def _request(kind: Kind, event_id: str, user: str, amount: str = "5", status: int = 200,
             answer: str = "accepted") -> Request:
    return Request(kind, event_id, "deposit", user, "USD", amount, b"{}", "msg_x",
                   status=status, answer=answer)


def test_an_accepted_event_missing_from_the_database_is_reported_lost(db):
    with db.cursor() as cur:
        verdict = check(cur, [_request(Kind.DEPOSIT, unique("chaos-t-e"), unique("u"))], [])
    assert len(verdict.lost) == 1
    assert not verdict.passed


def test_a_balance_that_differs_from_its_journal_is_a_violation(db):
    user = unique("u")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        cur.execute("INSERT INTO balances (user_id, asset, balance) VALUES (%s, 'USD', 7)",
                    (user,))
        cur.execute("INSERT INTO balance_events (source_event_id, event_type, user_id, asset,"
                    " delta) VALUES (%s, 'deposit', %s, 'USD', 5)", (unique("e"), user))
        verdict = check(cur, [], [user])
    assert any(f"{user}/USD = 7" in v for v in verdict.violations)


def test_a_written_invalid_request_and_a_non_duplicate_redelivery_are_violations(db):
    event_id = unique("chaos-t-e")
    with db.cursor() as cur:
        cur.execute("INSERT INTO payment_events (event_id, provider, event_type, user_id, asset,"
                    " amount, content_hash, trace_id, payload) VALUES"
                    " (%s, 'payments', 'deposit', 'u', 'USD', 5, 'h', 't', '{}')", (event_id,))
        sent = [_request(Kind.INVALID, event_id, "u", status=400, answer="invalid"),
                _request(Kind.REDELIVERY, unique("chaos-t-e"), "u", answer="accepted")]
        verdict = check(cur, sent, [])
    assert any("was written" in v for v in verdict.violations)
    assert any(v.startswith("redelivery") for v in verdict.violations)
