"""Which gateway events are known not to apply (ingest/refusals.py), without a database."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from paystream.ingest.errors import NotApplicableError
from paystream.ingest.refusals import (
    REFERENCE_OF_OTHER_USER,
    UNKNOWN_USER,
    Known,
    judge,
    record,
)
from paystream.schema.events import EventType, PaymentEvent


def _event(event_id: str, user: str, kind: EventType = EventType.DEPOSIT,
           reference: str | None = None, amount: str = "5") -> PaymentEvent:
    return PaymentEvent(event_id=event_id, event_type=kind, user_id=user, asset="USD",
                        amount=Decimal(amount), provider="payments", reference=reference)


def _codes(events: list[PaymentEvent], known: Known) -> list[str | None]:
    return [v.code if v else None for v in judge(events, known)]


def test_an_event_of_a_missing_user_is_refused_and_says_what_to_do() -> None:
    [verdict] = judge([_event("e1", "ghost")], Known(frozenset({"alice"}), {}))
    assert verdict is not None and verdict.code == UNKNOWN_USER
    assert "'ghost'" in verdict.detail and "create it first" in verdict.detail
    error = verdict.error("e1")
    assert isinstance(error, NotApplicableError)
    assert (error.status, error.code, error.event_id) == (422, UNKNOWN_USER, "e1")


def test_only_a_stored_reference_of_another_user_is_refused() -> None:
    known = Known(frozenset({"alice", "bob"}), {"dep-a": "alice"})
    events = [_event("r1", "bob", EventType.REFUND, "dep-a"),
              _event("r2", "alice", EventType.CHARGEBACK, "dep-a"),
              _event("r3", "bob", EventType.REFUND, "not-stored"),
              _event("s1", "bob", EventType.WITHDRAWAL_SETTLED, "dep-a")]
    assert _codes(events, known) == [REFERENCE_OF_OTHER_USER, None, None,
                                     REFERENCE_OF_OTHER_USER]
    verdict = judge(events[:1], known)[0]
    assert verdict is not None and "alice" not in verdict.detail  # not given away
    assert "reverses 'dep-a'" in verdict.detail


def test_an_unknown_user_is_named_before_a_bad_reference() -> None:
    known = Known(frozenset({"alice"}), {"dep-a": "alice"})
    assert _codes([_event("r1", "ghost", EventType.REFUND, "dep-a")], known) == [UNKNOWN_USER]


def test_an_earlier_event_of_the_group_counts_as_stored_unless_refused() -> None:
    known = Known(frozenset({"alice", "bob"}), {"dep-old": "alice"})
    events = [_event("dep-new", "alice"),
              _event("r1", "bob", EventType.REFUND, "dep-new"),  # alice's, stored first
              _event("dep-ghost", "ghost"),
              _event("r2", "bob", EventType.REFUND, "dep-ghost"),  # refused: not stored
              _event("dep-old", "bob"),  # the stored dep-old stands (a conflict)
              _event("r3", "bob", EventType.REFUND, "dep-old")]
    assert _codes(events, known) == [None, REFERENCE_OF_OTHER_USER, UNKNOWN_USER, None,
                                     None, REFERENCE_OF_OTHER_USER]


class _Cursor:
    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = None) -> None:
        self.statements.append((sql, params))


def test_repeats_in_one_group_are_one_row_with_their_attempts() -> None:
    known = Known(frozenset(), {})
    first, second = _event("e1", "ghost", amount="1"), _event("e1", "ghost", amount="2")
    other = _event("e2", "ghost")
    events = [first, other, second]
    verdicts = judge(events, known)
    cur = _Cursor()
    record(cur, [(e, f"t{n}", v) for n, (e, v) in enumerate(zip(events, verdicts, strict=True))
                 if v is not None])
    [(sql, (document,))] = cur.statements
    rows = json.loads(document)
    assert [(r["event_id"], r["attempts"], r["trace_id"], r["event"]["amount"])
            for r in rows] == [("e1", 2, "t2", "2"), ("e2", 1, "t1", "5")]
    assert "attempts = refused_deliveries.attempts + EXCLUDED.attempts" in sql


def test_nothing_refused_sends_nothing() -> None:
    cur = _Cursor()
    record(cur, [])
    assert cur.statements == []
