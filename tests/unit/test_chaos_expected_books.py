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


def _ref(kind: Kind, n: int, event_type: str, amount: str, seq: int, reference: str, *,
         user: str = "u1") -> Request:
    req = _req(kind, n, event_type, amount, seq, user=user)
    req.reference = reference
    return req


def test_holds_closes_and_refunds_are_replayed_in_answer_order():
    sent = [_req(Kind.DEPOSIT, 1, "deposit", "100", seq=1),
            _req(Kind.HOLD, 2, "withdrawal_requested", "30", seq=2),
            _ref(Kind.CLOSE, 3, "withdrawal_settled", "30", 3, "e2"),
            _ref(Kind.CLOSE, 4, "withdrawal_failed", "30", 4, "e2"),   # closed already
            _req(Kind.HOLD, 5, "withdrawal_requested", "50", seq=5),
            _ref(Kind.CLOSE, 6, "withdrawal_failed", "50", 6, "e5"),   # back to available
            _req(Kind.HOLD, 7, "withdrawal_requested", "71", seq=7),   # 70 available
            _ref(Kind.CLOSE, 8, "withdrawal_settled", "71", 8, "e7"),  # never placed
            _req(Kind.HOLD, 9, "withdrawal_requested", "20", seq=9)]   # still open
    books = expected_books(sent)
    assert books.outcomes == {"e1": "applied", "e2": "applied", "e3": "applied",
                              "e4": "hold_not_open", "e5": "applied", "e6": "applied",
                              "e7": "insufficient_funds", "e8": "hold_not_open",
                              "e9": "applied"}
    assert books.balances == {("u1", "USD"): Decimal(50)}
    assert books.held == {("u1", "USD"): Decimal(20)}
    # A settle moves nothing on the available book; a failure gives the amount back.
    assert books.entries["e3"] == [] and books.entries["e6"] == [("u1", "USD", Decimal(50))]


def test_refunds_never_exceed_the_deposit_and_a_shortfall_flags_the_user():
    sent = [_req(Kind.DEPOSIT, 1, "deposit", "100", seq=1),
            _ref(Kind.REFUND, 2, "refund", "60", 2, "e1"),
            _ref(Kind.REFUND, 3, "refund", "41", 3, "e1"),       # 40 left: too much
            _req(Kind.WITHDRAWAL, 4, "withdrawal", "35", seq=4),  # 40 -> 5
            _ref(Kind.REFUND, 5, "refund", "40", 5, "e1"),       # 5 taken, 35 owed
            _req(Kind.DEPOSIT, 6, "deposit", "10", seq=6),
            _req(Kind.WITHDRAWAL, 7, "withdrawal", "1", seq=7),   # flagged
            _ref(Kind.REFUND, 8, "refund", "1", 8, "nope")]
    books = expected_books(sent)
    assert [books.outcomes[f"e{i}"] for i in range(1, 9)] == [
        "applied", "applied", "exceeds_original", "applied", "shortfall", "applied",
        "account_flagged", "invalid_reversal"]
    assert books.entries["e5"] == [("u1", "USD", Decimal(-5))]
    assert books.balances == {("u1", "USD"): Decimal(10)}
