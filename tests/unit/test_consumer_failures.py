"""Failure classification and backoff: what the retry loop does with each error."""

from __future__ import annotations

import random

import psycopg2
import psycopg2.errors
import pytest
from confluent_kafka import KafkaError, KafkaException

from paystream.consumers.backoff import Backoff
from paystream.consumers.dead_letters.send import DlqLimitExceededError
from paystream.consumers.failures import (
    FailureClass,
    FatalError,
    PoisonError,
    TransientError,
    classify,
    describe,
)


@pytest.mark.parametrize("code", ["40001", "40P01", "55P03", "57014", "57P01", "57P03",
                                  "08006", "53300"])
def test_transient_sqlstates(code: str) -> None:
    assert classify(psycopg2.errors.lookup(code)("x")) is FailureClass.TRANSIENT


def test_connection_loss_without_sqlstate_is_transient() -> None:
    assert classify(psycopg2.OperationalError("server closed the connection")) \
        is FailureClass.TRANSIENT
    assert classify(psycopg2.InterfaceError("connection already closed")) \
        is FailureClass.TRANSIENT


@pytest.mark.parametrize("code", ["23505", "23514", "22003"])
def test_constraint_and_data_errors_are_deterministic(code: str) -> None:
    assert classify(psycopg2.errors.lookup(code)("x")) is FailureClass.DETERMINISTIC


def test_schema_mismatch_is_fatal_not_poison() -> None:
    # An undefined table would fail every message: stop instead of dead-lettering all.
    assert classify(psycopg2.errors.lookup("42P01")("x")) is FailureClass.FATAL


def test_own_exceptions() -> None:
    assert classify(PoisonError("malformed_json", "x")) is FailureClass.DETERMINISTIC
    assert classify(TransientError("dlq not acked")) is FailureClass.TRANSIENT
    assert classify(FatalError("stop")) is FailureClass.FATAL
    assert classify(DlqLimitExceededError("too many")) is FailureClass.FATAL


def test_broker_errors_are_transient_unless_fatal() -> None:
    transport = KafkaException(KafkaError(KafkaError._TRANSPORT))
    assert classify(transport) is FailureClass.TRANSIENT
    fatal = KafkaException(KafkaError(KafkaError._FENCED, fatal=True))
    assert classify(fatal) is FailureClass.FATAL


def test_describe_names_the_sqlstate() -> None:
    assert describe(psycopg2.errors.lookup("23505")("dup")) == "UniqueViolation[23505]: dup"


def test_backoff_grows_exponentially_with_jitter_inside_bounds() -> None:
    b = Backoff(initial_s=0.1, maximum_s=2.0, rng=random.Random(7))
    delays = [b.next_delay() for _ in range(8)]
    caps = [min(2.0, 0.1 * 2 ** n) for n in range(8)]
    for delay, cap in zip(delays, caps, strict=True):
        assert cap / 2 <= delay <= cap
    assert max(delays) <= 2.0
    b.reset()
    assert b.next_delay() <= 0.1


def test_backoff_jitter_differs_between_consumers() -> None:
    a = Backoff(rng=random.Random(1))
    b = Backoff(rng=random.Random(2))
    assert [a.next_delay() for _ in range(5)] != [b.next_delay() for _ in range(5)]


def test_backoff_never_overflows() -> None:
    b = Backoff(initial_s=0.2, maximum_s=10.0, attempt=5000)
    assert 5.0 <= b.next_delay() <= 10.0
