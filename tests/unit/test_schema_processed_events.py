"""processed_events' rules that need no database: which outcomes are final, what may
move, and what may reach SQL as a key."""

from __future__ import annotations

from typing import Any

import pytest

from paystream.schema import processed_events
from paystream.schema.idempotency import idempotency_key
from paystream.schema.processed_events import FINAL_OUTCOMES, WAITING_OUTCOMES, Outcome


class NoCursor:
    """Fails the test if a statement is sent: these calls must refuse or return first."""

    def execute(self, *args: Any) -> None:
        raise AssertionError(f"no statement expected, got {args[0]!r}")


def test_every_outcome_is_either_final_or_waiting() -> None:
    assert set(FINAL_OUTCOMES) | set(WAITING_OUTCOMES) == {o.value for o in Outcome}
    assert not set(FINAL_OUTCOMES) & set(WAITING_OUTCOMES)
    assert set(WAITING_OUTCOMES) == {"pending_finality", "credited"}


@pytest.mark.parametrize(("waiting", "final"), [
    (Outcome.APPLIED, Outcome.REORGED),            # a final outcome never changes
    (Outcome.INSUFFICIENT_FUNDS, Outcome.APPLIED),  # a rejection stays a rejection
    (Outcome.PENDING_FINALITY, Outcome.CREDITED),   # waiting to waiting is no settlement
])
def test_settle_only_moves_a_waiting_outcome_to_a_final_one(waiting: Outcome,
                                                            final: Outcome) -> None:
    with pytest.raises(ValueError, match="waiting to final"):
        processed_events.settle(NoCursor(), ["0" * 64], waiting, final)  # type: ignore[arg-type]


def test_nothing_to_write_sends_nothing() -> None:
    cur: Any = NoCursor()
    assert processed_events.record(cur, []) == set()
    assert processed_events.settle(cur, [], Outcome.PENDING_FINALITY, Outcome.APPLIED) == 0


@pytest.mark.parametrize("bad", ['abc', '"' + "0" * 63, "0" * 63 + ",", "0" * 32 + "}" + "0" * 31,
                                 "0" * 63 + " "])
def test_a_key_that_is_not_64_hex_digits_never_reaches_sql(bad: str) -> None:
    good = idempotency_key("e-1", "deposit")
    with pytest.raises(ValueError, match="64 hex digits"):
        processed_events.settle(NoCursor(), [good, bad],  # type: ignore[arg-type]
                                Outcome.PENDING_FINALITY, Outcome.APPLIED)
