"""Any amount the rules accept survives Postgres' NUMERIC(38,18) exactly."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import psycopg2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paystream.schema.amounts import AMOUNT_PATTERN, AmountError, format_amount, parse_amount
from paystream.schema.db import connect, database_url, where
from paystream.schema.events import EventType, PaymentEvent
from paystream.schema.outbox import WriteOutcome, write_event, write_events
from tests.support.ids import unique

FIXTURE_OK = settings(max_examples=300, deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def conn() -> Iterator[psycopg2.extensions.connection]:
    try:
        connection = connect(database_url("owner"))
    except psycopg2.OperationalError as exc:
        pytest.fail(f"Postgres is not reachable at {where(database_url('owner'))} ({exc}); "
                    "run `paystream stack up`")
    try:
        yield connection
    finally:
        connection.close()


def _scaled(n: int, scale: int) -> Decimal:
    return Decimal((0, tuple(int(d) for d in str(n)), -scale))


# Any amount the rules allow: n units of 10^-scale, below 10^20.
allowed_amounts = st.integers(min_value=0, max_value=18).flatmap(
    lambda scale: st.integers(min_value=1, max_value=10 ** (20 + scale) - 1).map(
        lambda n: _scaled(n, scale)))


def _through_numeric(conn, text: str) -> Decimal:
    with conn.cursor() as cur:
        cur.execute("SELECT %s::numeric(38, 18)", (text,))
        stored = cur.fetchone()[0]
    conn.rollback()
    return stored


@FIXTURE_OK
@given(allowed_amounts)
def test_every_allowed_amount_round_trips_through_numeric(conn, amount: Decimal) -> None:
    text = format_amount(parse_amount(format_amount(amount)))
    stored = _through_numeric(conn, text)
    assert stored == amount
    assert format_amount(stored) == text


@FIXTURE_OK
@given(st.from_regex(AMOUNT_PATTERN, fullmatch=True))
def test_any_accepted_text_round_trips_through_numeric(conn, text: str) -> None:
    try:
        amount = parse_amount(text)
    except AmountError:
        return  # refused texts never reach the database
    assert _through_numeric(conn, format_amount(amount)) == amount


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(allowed_amounts)
def test_an_event_written_through_the_outbox_keeps_its_amount(conn, amount: Decimal) -> None:
    event = PaymentEvent(unique("ev-prop"), EventType.DEPOSIT, "prop-user", "USD", amount,
                         "payments")
    try:
        with conn.cursor() as cur:
            assert write_event(cur, event, "trace-prop") is WriteOutcome.ACCEPTED
            cur.execute("SELECT amount, payload->>'amount' FROM payment_events"
                        " WHERE event_id = %s", (event.event_id,))
            stored, wire = cur.fetchone()
    finally:
        conn.rollback()  # a property test leaves no rows (and no outbox message) behind
    assert stored == amount and Decimal(wire) == amount and wire == format_amount(amount)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(allowed_amounts, min_size=1, max_size=8))
def test_events_written_as_a_group_keep_their_amounts(conn, amounts: list[Decimal]) -> None:
    # The group commit's path: one JSON document of rows, unpacked by Postgres.
    events = [(PaymentEvent(unique("ev-group"), EventType.DEPOSIT, "prop-user", "USD", a,
                            "payments"), "trace-prop") for a in amounts]
    try:
        with conn.cursor() as cur:
            assert write_events(cur, events) == [WriteOutcome.ACCEPTED] * len(events)
            cur.execute("SELECT event_id, amount, payload->>'amount' FROM payment_events"
                        " WHERE event_id = ANY(%s)", ([e.event_id for e, _ in events],))
            stored = {row[0]: row[1:] for row in cur.fetchall()}
    finally:
        conn.rollback()
    for event, _ in events:
        amount, wire = stored[event.event_id]
        assert amount == event.amount and wire == format_amount(event.amount)
