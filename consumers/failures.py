"""Failure classes: what an error means for the batch in hand.

- TRANSIENT: the world is briefly broken (DB unreachable, lock or statement timeout,
  deadlock, serialization failure, broker unavailable). Retry the whole batch later,
  commit nothing, stay in the group.
- DETERMINISTIC: this message can never succeed as it is (bad bytes, bad contract, a
  value the schema refuses). Dead-letter it and move on (consumers/dead_letters/send.py: too many of
  the unexpected ones stop the group, not the process).
- FATAL: the process itself is wrong (schema missing, bad configuration). Stop loudly;
  retrying or dead-lettering would only hide it.
"""

from __future__ import annotations

from enum import StrEnum

import psycopg2
import psycopg2.errors
from confluent_kafka import KafkaError, KafkaException


class FailureClass(StrEnum):
    TRANSIENT = "transient"
    DETERMINISTIC = "deterministic"
    FATAL = "fatal"


# SQLSTATEs that a retry can outlive (PostgreSQL Appendix A).
TRANSIENT_SQLSTATE_CLASSES = ("08", "53")  # connection exception, insufficient resources
TRANSIENT_SQLSTATES = frozenset({
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "55P03",  # lock_not_available (lock_timeout)
    "57014",  # query_canceled (statement_timeout)
    "57P01",  # admin_shutdown: the server is stopping
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now: the server is starting
})
# Class 42 (syntax error, undefined table/column) means code and schema disagree:
# every message would fail the same way, so dead-lettering them would be wrong.
FATAL_SQLSTATE_CLASSES = ("42",)


# psycopg2.errors has one class per SQLSTATE; map back the ones we classify explicitly.
_SQLSTATE_OF_CLASS = {
    psycopg2.errors.lookup(code): code
    for code in [*sorted(TRANSIENT_SQLSTATES), "08006", "53300", "42P01", "42703", "23505",
                 "23514", "22003"]
}


class PoisonError(Exception):
    """A deterministic failure of one message; `reason` is a short machine label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class TransientError(Exception):
    """A retriable failure raised by our own code (e.g. a DLQ delivery not acknowledged)."""


class FatalError(Exception):
    """Stop the consumer: continuing would do harm or hide a defect."""


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error; from its class when raised without a server
    response (psycopg2 sets pgcode only for errors the server sent)."""
    code: str | None = getattr(exc, "pgcode", None)
    if code is None and isinstance(exc, psycopg2.Error):
        code = _SQLSTATE_OF_CLASS.get(type(exc))
    return code


def classify(exc: BaseException) -> FailureClass:
    """The failure class of an exception raised while applying or committing a batch."""
    if isinstance(exc, FatalError):
        return FailureClass.FATAL
    if isinstance(exc, TransientError | TimeoutError | ConnectionError):
        return FailureClass.TRANSIENT
    if isinstance(exc, PoisonError):
        return FailureClass.DETERMINISTIC
    if isinstance(exc, psycopg2.Error):
        return _classify_db(exc)
    if isinstance(exc, KafkaException):
        return _classify_kafka(exc.args[0] if exc.args else None)
    return FailureClass.DETERMINISTIC


def _classify_db(exc: psycopg2.Error) -> FailureClass:
    code = sqlstate(exc)
    if code is None:
        # No SQLSTATE: the connection broke (refused, reset, closed by the server).
        if isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError):
            return FailureClass.TRANSIENT
        return FailureClass.DETERMINISTIC
    if code in TRANSIENT_SQLSTATES or code.startswith(TRANSIENT_SQLSTATE_CLASSES):
        return FailureClass.TRANSIENT
    if code.startswith(FATAL_SQLSTATE_CLASSES):
        return FailureClass.FATAL
    return FailureClass.DETERMINISTIC


def _classify_kafka(err: object) -> FailureClass:
    if not isinstance(err, KafkaError):
        return FailureClass.TRANSIENT
    if err.fatal():
        return FailureClass.FATAL
    # Broker-side trouble is never the message's fault: retry until it is back.
    return FailureClass.TRANSIENT


def describe(exc: BaseException) -> str:
    code = sqlstate(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{type(exc).__name__}[{code}]: {text}" if code else f"{type(exc).__name__}: {text}"
