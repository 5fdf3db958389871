"""Dead letters: a message that can never succeed, sent to the DLQ topic with its cause.

Two kinds (DeadLetterKind), and only one counts against the DLQ limit:
  - judged: the handler's verdict about an untrusted record (undecodable, forged, a
    schema violation, an unexplained settlement). One provider's bad traffic can make
    thousands; each is dead-lettered with its cause and counted per reason, never
    stopping the group (the PaystreamDeadLetterFlood alert tells a person).
  - unexpected: the handler raised on the record when applied alone (handler_error,
    db_rejected_*): our code or schema is broken, the bad-deploy case the limit is for.

The DLQ record keeps the original key and value bytes untouched and the original
headers, and adds `dlq.*` headers naming the error and the origin. A dead letter counts
only once the broker has acknowledged it (flush + delivery report): the commit protocol
moves the offset past a poison message only after that.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from confluent_kafka import KafkaError, Message, Producer

from paystream.consumers.failures import FatalError, TransientError
from paystream.consumers.records import Record

# Headers the DLQ producer adds; the DLQ mirror reads them back.
H_SOURCE_TOPIC = "dlq.source.topic"
H_SOURCE_PARTITION = "dlq.source.partition"
H_SOURCE_OFFSET = "dlq.source.offset"
H_REASON = "dlq.error.reason"
H_KIND = "dlq.error.kind"  # judged | unexpected (DeadLetterKind)
H_DETAIL = "dlq.error.detail"
H_GROUP = "dlq.consumer.group"
H_FAILED_AT = "dlq.failed_at"
H_ATTEMPTS = "dlq.attempts"
DLQ_HEADERS = (H_SOURCE_TOPIC, H_SOURCE_PARTITION, H_SOURCE_OFFSET, H_REASON, H_KIND,
               H_DETAIL, H_GROUP, H_FAILED_AT, H_ATTEMPTS)
MAX_DETAIL = 2000  # a detail is for a person; a stack dump belongs in the logs

# Message headers as the producer takes them (confluent-kafka's own header type).
Headers = list[tuple[str, str | bytes | None]]
DeliveryReport = Callable[[KafkaError | None, Message], None]


class DeadLetterKind(StrEnum):
    JUDGED = "judged"  # the handler's verdict about the record (not counted by the limit)
    UNEXPECTED = "unexpected"  # the handler raised on it: counted by the limit


@dataclass(frozen=True)
class DeadLetter:
    record: Record
    reason: str
    detail: str
    # How the consumer got here, e.g. the batch error that led to isolating the message.
    attempts: tuple[dict[str, str], ...] = field(default=())
    kind: DeadLetterKind = DeadLetterKind.JUDGED
    # The provider the record names, when it decoded (as it claims: a forged record's
    # is the forger's word), for the log line that tells a person whose traffic it is.
    provider: str | None = None


class DlqLimitExceededError(FatalError):
    """More unexpected failures in the window than the policy allows: likely a bad
    deploy. The runtime stops the group (consumers/stops.py) instead of exiting."""


@dataclass
class DlqRateLimit:
    """At most `limit` unexpected dead letters in any `window_s` seconds (0: the first
    one stops the group). Judged dead letters are not counted (see the module doc)."""

    limit: int
    window_s: float
    _times: deque[float] = field(default_factory=deque)

    def remaining(self, now: float | None = None) -> int:
        """How many more unexpected dead letters the window allows now. Nothing is
        recorded here: call `record` once the dead letters are acknowledged, so a batch
        that is rolled back does not use up the budget."""
        now = time.monotonic() if now is None else now
        self._expire(now)
        return max(0, self.limit - len(self._times))

    def exceeded(self, causes: str) -> DlqLimitExceededError:
        """The error that stops the group: the budget is spent and one more failed."""
        return DlqLimitExceededError(
            f"more than {self.limit} unexpected failures within {self.window_s:g}s (the"
            f" DLQ limit): stopping instead of dead-lettering the stream; {causes}")

    def record(self, count: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self._times.extend([now] * count)
        self._expire(now)

    def _expire(self, now: float) -> None:
        while self._times and self._times[0] <= now - self.window_s:
            self._times.popleft()


def dlq_headers(letter: DeadLetter, group: str, now: datetime | None = None) -> Headers:
    origin = letter.record.origin
    failed_at = (now or datetime.now(UTC)).isoformat()
    attempts = [*letter.attempts,
                {"at": failed_at, "group": group, "reason": letter.reason,
                 "kind": letter.kind.value, "detail": letter.detail[:MAX_DETAIL]}]
    added = {
        H_SOURCE_TOPIC: origin.topic,
        H_SOURCE_PARTITION: str(origin.partition),
        H_SOURCE_OFFSET: str(origin.offset),
        H_REASON: letter.reason,
        H_KIND: letter.kind.value,
        H_DETAIL: letter.detail[:MAX_DETAIL],
        H_GROUP: group,
        H_FAILED_AT: failed_at,
        H_ATTEMPTS: json.dumps(attempts, separators=(",", ":")),
    }
    kept: Headers = [(k, v if v is not None else b"") for k, v in letter.record.headers
                     if k not in added]
    return kept + [(k, v.encode("utf-8")) for k, v in added.items()]


class DeadLetterProducer:
    """Produces dead letters and waits until the broker acknowledged every one."""

    def __init__(self, producer: Producer, topic: str, group: str,
                 flush_timeout_s: float) -> None:
        self._producer = producer
        self.topic = topic
        self._group = group
        self._flush_timeout_s = flush_timeout_s

    def send(self, letters: Sequence[DeadLetter]) -> None:
        """Produce, flush and check each delivery report; raise TransientError if any failed."""
        if not letters:
            return
        failures: list[str] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failures.append(str(err))

        for letter in letters:
            self._produce(letter, on_delivery)
        remaining = self._producer.flush(self._flush_timeout_s)
        if remaining:
            raise TransientError(f"{remaining} dead letters not acknowledged by the broker")
        if failures:
            raise TransientError(f"dead letter delivery failed: {failures[0]}")

    def _produce(self, letter: DeadLetter, on_delivery: DeliveryReport) -> None:
        while True:
            try:
                self._producer.produce(
                    self.topic, key=letter.record.key, value=letter.record.value,
                    headers=dlq_headers(letter, self._group), on_delivery=on_delivery)
                return
            except BufferError:
                # Local queue full: serve delivery reports to make room, then retry.
                self._producer.poll(0.1)

    def close(self, timeout_s: float = 5.0) -> None:
        self._producer.flush(timeout_s)
