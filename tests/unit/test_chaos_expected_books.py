"""The chaos checker's own arithmetic: balances and outcomes recomputed from the sender's
record, in the order the answers came back; and the hostile deliveries it sends are ones
the real ingest parser accepts, meaning exactly the amount the checker expects."""

from __future__ import annotations

from decimal import Decimal

from paystream.chaos.invariants import expected_books
from paystream.chaos.traffic import Kind, Request, TrafficPlan
from paystream.ingest.payments import parse_payment
from paystream.ingest.request_body import parse_json


def _req(kind: Kind, n: int, event_type: str, amount: str, seq: int | None, *,
         user: str = "u1", asset: str = "USD", status: int | None = 200) -> Request:
    return Request(kind, f"e{n}", event_type, user, asset, amount, b"{}", f"msg_{n}",
                   status=status, answered_seq=seq)


def test_a_debit_applies_only_if_the_balance_answered_before_it_covers_it():
    # Listed in send order, but the withdrawal's answer came back first.
    sent = [_req(Kind.DEPOSIT, 1, "deposit", "100", seq=2),
            _req(Kind.WITHDRAWAL, 2, "withdrawal", "60", seq=1),
            _req(Kind.WITHDRAWAL, 3, "withdrawal_fee", "30.5", seq=3),
            _req(Kind.WITHDRAWAL, 4, "withdrawal", "70", seq=4)]
    books = expected_books(sent)
    assert books.outcomes == {"e1": "applied", "e2": "insufficient_funds",
                              "e3": "applied", "e4": "insufficient_funds"}
    assert books.balances == {("u1", "USD"): Decimal("69.5")}


def test_users_and_assets_are_separate_books():
    sent = [_req(Kind.DEPOSIT, 1, "deposit", "10", seq=1),
            _req(Kind.WITHDRAWAL, 2, "withdrawal", "10", seq=2, asset="EUR"),
            _req(Kind.WITHDRAWAL, 3, "withdrawal", "10", seq=3, user="u2"),
            _req(Kind.HOSTILE, 4, "deposit", "0.000000000000000001", seq=4, user="u2")]
    books = expected_books(sent)
    assert books.outcomes == {"e1": "applied", "e2": "insufficient_funds",
                              "e3": "insufficient_funds", "e4": "applied"}
    assert books.balances == {("u1", "USD"): Decimal(10),
                              ("u2", "USD"): Decimal("0.000000000000000001")}


def test_refused_unanswered_poison_and_repeated_requests_move_nothing():
    first = _req(Kind.DEPOSIT, 1, "deposit", "5", seq=1)
    sent = [first,
            _req(Kind.DEPOSIT, 2, "deposit", "7", seq=2, status=400),
            _req(Kind.DEPOSIT, 3, "deposit", "7", seq=None, status=None),
            _req(Kind.POISON, 4, "deposit", "9", seq=3, user="ghost"),
            Request(Kind.REDELIVERY, "e1", "deposit", "u1", "USD", "5", b"{}", "msg_1",
                    status=200, answered_seq=4, original=first)]
    books = expected_books(sent)
    assert books.balances == {("u1", "USD"): Decimal(5)}
    assert books.outcomes == {"e1": "applied"}


def test_every_hostile_delivery_parses_to_the_amount_the_checker_expects():
    plan = TrafficPlan("t0", users=3, seed=11)
    seen = set()
    for _ in range(300):
        req = plan._hostile(plan.users[0], "EUR")
        seen.add(req.extra["flavour"])
        event = parse_payment(parse_json(req.body), "USD", ("USD", "EUR"))
        assert (event.event_id, event.user_id, event.asset) == \
            (req.event_id, plan.users[0], "EUR")
        assert event.amount == Decimal(req.amount), req.body[:200]
    assert seen == {"tiny", "precision", "exponent", "escaped", "decorated"}


def test_hostile_alchemy_deliveries_are_valid_json_for_the_runs_network():
    plan = TrafficPlan("t0", users=3, seed=5)
    plan.network = "CHAOS_T0"
    plan.chain_addresses = ["0x" + "12" * 20]
    for _ in range(40):
        req = plan._hostile_chain()
        body = parse_json(req.body)
        assert req.endpoint == "alchemy"
        assert body["event"]["network"] == "CHAOS_T0"
        activity = body["event"]["activity"][0]
        if req.extra["flavour"] == "nft":  # Alchemy's ERC-721 form names no transaction
            assert "hash" not in activity and "blockNum" not in activity
        else:
            assert activity["hash"] == req.event_id
