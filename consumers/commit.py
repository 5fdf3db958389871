"""The commit protocol: when a batch's effects become durable and when offsets move.

For every polled batch, in this order:
  1. BEGIN; the handler applies the whole batch with multi-row statements.
  2. If that raised a deterministic error, ROLLBACK and apply the batch again with one
     SAVEPOINT per message: a message that fails alone becomes a dead letter.
     A transient error (at any step up to 5) rolls back and the runtime retries the
     batch later: nothing is committed, nothing is dead-lettered.
  3. The DLQ rate limit counts UNEXPECTED dead letters only (the handler raised on them
     at step 2; the ones it judged and returned are not counted). Step 2 stops at the
     one that would exceed it: that record and the rest of the batch are left unapplied
     (rolled back to its savepoint, offsets not committed), the part before it goes on
     to steps 4-6, and then the group stops (runtime.py, consumers/stops.py). So each
     window, and each resume, gets through at least `limit` of them.
  4. Produce the dead letters to the DLQ topic, flush, check every delivery report.
  5. COMMIT the database transaction.
  6. Commit offset+1 of the batch's last message per partition, synchronously, checking
     every partition's error and retrying retriable ones within a time budget.
A crash after 5 and before 6 redelivers the batch; the idempotency rows written in 1
turn it into a no-op. Offsets that could not be committed in 6 stay pending: retried
at the top of the next loop pass, before the next consume(); committed in on_revoke
(time-bounded); dropped in on_lost.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Sequence

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from paystream.consumers import metrics
from paystream.consumers.connection import Database
from paystream.consumers.crash_hooks import CrashHooks
from paystream.consumers.dead_letters.send import (
    DeadLetter,
    DeadLetterKind,
    DeadLetterProducer,
    DlqRateLimit,
)
from paystream.consumers.failures import FailureClass, PoisonError, classify, describe, sqlstate
from paystream.consumers.handler import BatchHandler, BatchResult
from paystream.consumers.records import Record
from paystream.schema.db import Connection

log = structlog.get_logger("consumers.commit")

# Commit errors worth retrying right away: the coordinator is moving or slow.
RETRIABLE_COMMIT_ERRORS = frozenset({
    KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._WAIT_COORD,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
})

PartitionKey = tuple[str, int]


def next_offsets(records: Iterable[Record]) -> dict[PartitionKey, int]:
    """Offset to commit per partition: the last record's offset + 1."""
    out: dict[PartitionKey, int] = {}
    for record in records:
        key = (record.origin.topic, record.origin.partition)
        out[key] = max(out.get(key, 0), record.origin.offset + 1)
    return out


def first_offsets(records: Iterable[Record]) -> dict[PartitionKey, int]:
    """The first (lowest) offset per partition: where a rolled-back batch resumes."""
    out: dict[PartitionKey, int] = {}
    for record in records:
        key = (record.origin.topic, record.origin.partition)
        out[key] = min(out.get(key, record.origin.offset), record.origin.offset)
    return out


def is_retriable_commit_error(err: KafkaError) -> bool:
    return err.code() in RETRIABLE_COMMIT_ERRORS or bool(err.retriable())


def commit_offsets(consumer: Consumer, offsets: dict[PartitionKey, int], budget_s: float,
                   group: str) -> dict[PartitionKey, int]:
    """Step 6: commit synchronously; return the offsets that could not be committed."""
    todo = dict(offsets)
    given_up: dict[PartitionKey, int] = {}
    deadline = time.monotonic() + budget_s
    pause = 0.05
    while todo:
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(todo.items())]
        retry: dict[PartitionKey, int] = {}
        try:
            result = consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as exc:
            err: KafkaError = exc.args[0]  # a KafkaException carries its KafkaError
            if err.code() == KafkaError._NO_OFFSET:
                return given_up  # nothing new to commit
            if is_retriable_commit_error(err) and time.monotonic() < deadline:
                retry = todo
            else:
                _give_up(group, err, todo, given_up)
        else:
            for tp in result or ():
                if tp.error is None:
                    continue
                key = (tp.topic, tp.partition)
                if is_retriable_commit_error(tp.error) and time.monotonic() < deadline:
                    retry[key] = todo[key]
                else:
                    _give_up(group, tp.error, {key: todo[key]}, given_up)
        if not retry:
            break
        todo = retry
        metrics.RETRIES.labels(group, "commit").inc()
        time.sleep(pause)
        pause = min(pause * 2, 1.0)
    return given_up


def _give_up(group: str, err: KafkaError, offsets: dict[PartitionKey, int],
             given_up: dict[PartitionKey, int]) -> None:
    log.warning("offset_commit_failed", error=str(err),
                partitions=[f"{t}[{p}]" for t, p in offsets])
    metrics.COMMIT_FAILURES.labels(group, err.name()).inc()
    given_up.update(offsets)


def apply_with_isolation(conn: Connection, handler: BatchHandler,
                         records: Sequence[Record], budget: int | None = None) -> BatchResult:
    """Steps 1 and 2: the whole batch at once, else one SAVEPOINT per message. `budget`:
    how many unexpected dead letters the DLQ limit still allows; at the one past it the
    batch is cut (result.cut) and the records from there on are not applied."""
    try:
        with conn.cursor() as cur:
            return handler.apply(cur, records)
    except Exception as exc:
        if classify(exc) is not FailureClass.DETERMINISTIC:
            raise
        batch_error = describe(exc)
        log.warning("batch_failed_isolating", error=batch_error, size=len(records))
        conn.rollback()
    result = BatchResult()
    attempt = {"phase": "batch", "error": batch_error}
    unexpected: list[DeadLetter] = []
    with conn.cursor() as cur:
        for index, record in enumerate(records):
            cur.execute("SAVEPOINT paystream_message")
            try:
                part = handler.apply(cur, [record])
            except Exception as exc:
                if classify(exc) is not FailureClass.DETERMINISTIC:
                    raise
                cur.execute("ROLLBACK TO SAVEPOINT paystream_message")
                reason, detail = _poison_cause(exc)
                # A PoisonError is the handler's verdict on the record; anything else it
                # raised means our code or schema is broken: that is what the limit counts.
                kind = (DeadLetterKind.JUDGED if isinstance(exc, PoisonError)
                        else DeadLetterKind.UNEXPECTED)
                letter = DeadLetter(record, reason, detail, (attempt,), kind)
                if kind is DeadLetterKind.UNEXPECTED:
                    if budget is not None and len(unexpected) >= budget:
                        result.cut, result.cut_cause = index, causes([*unexpected, letter])
                        break
                    unexpected.append(letter)
                result.dead_letters.append(letter)
            else:
                cur.execute("RELEASE SAVEPOINT paystream_message")
                result.merge(part)
    return result


def unexpected_letters(result: BatchResult) -> list[DeadLetter]:
    return [d for d in result.dead_letters if d.kind is DeadLetterKind.UNEXPECTED]


def causes(letters: Sequence[DeadLetter]) -> str:
    """Why the limit tripped, for the stop row and the log: counts per reason and the
    first failure's detail."""
    if not letters:
        return ""
    counts = ", ".join(f"{reason} x{n}" for reason, n in
                       Counter(d.reason for d in letters).most_common())
    return f"{counts}; first: {letters[0].detail[:300]}"


def _poison_cause(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, PoisonError):
        return exc.reason, exc.detail
    code = sqlstate(exc)
    return (f"db_rejected_{code}" if code else "handler_error"), describe(exc)


class CommitProtocol:
    """Runs steps 1-6 for one batch and keeps the offsets that still need committing."""

    def __init__(self, *, group: str, consumer: Consumer, db: Database, handler: BatchHandler,
                 dlq: DeadLetterProducer, dlq_limit: DlqRateLimit, commit_budget_s: float,
                 hooks: CrashHooks | None = None) -> None:
        self._group = group
        self._consumer = consumer
        self._db = db
        self._handler = handler
        self._dlq = dlq
        self._dlq_limit = dlq_limit
        self._commit_budget_s = commit_budget_s
        self._hooks = hooks or CrashHooks()
        # Offsets whose batch is durable in the DB but not yet committed to Kafka.
        self.pending: dict[PartitionKey, int] = {}

    def process(self, records: Sequence[Record]) -> BatchResult:
        """Apply and commit one batch; raise (after rolling back) if it must be retried.
        DlqLimitExceededError comes after the commit of the part before the cut."""
        started = time.monotonic()
        try:
            conn = self._db.connection()
            result = apply_with_isolation(conn, self._handler, records,  # steps 1-3
                                          self._dlq_limit.remaining())
            self._dlq.send(result.dead_letters)                            # step 4
            self._hooks.before_db_commit()
            conn.commit()                                                  # step 5
        except BaseException:
            self._db.rollback_quietly()
            raise
        self._hooks.after_db_commit()
        metrics.DB_TRANSACTION_SECONDS.labels(self._group).observe(time.monotonic() - started)
        self._dlq_limit.record(len(unexpected_letters(result)))
        done = records if result.cut is None else records[:result.cut]
        self._account(done, result)
        self.pending.update(next_offsets(done))
        self.commit_pending()                                              # step 6
        if result.cut is not None:
            # What came before the cut is committed; the rest waits for the resume.
            raise self._dlq_limit.exceeded(result.cut_cause)
        return result

    def commit_pending(self, only: Iterable[PartitionKey] | None = None,
                       budget_s: float | None = None) -> None:
        """Commit pending offsets (all, or those of `only`); failures stay pending."""
        keys = set(self.pending) if only is None else set(only) & set(self.pending)
        if not keys:
            return
        started = time.monotonic()
        todo = {k: self.pending[k] for k in keys}
        failed = commit_offsets(self._consumer, todo,
                                self._commit_budget_s if budget_s is None else budget_s,
                                self._group)
        for key in keys:
            if key not in failed and self.pending.get(key) == todo[key]:
                del self.pending[key]
        metrics.COMMIT_SECONDS.labels(self._group).observe(time.monotonic() - started)

    def forget(self, keys: Iterable[PartitionKey]) -> None:
        """on_lost: the partitions belong to someone else now; never commit them."""
        for key in keys:
            self.pending.pop(key, None)

    def _account(self, records: Sequence[Record], result: BatchResult) -> None:
        metrics.BATCHES.labels(self._group).inc()
        for outcome, count in result.outcomes.items():
            metrics.MESSAGES.labels(self._group, outcome).inc(count)
        for letter in result.dead_letters:
            metrics.DEAD_LETTERS.labels(self._group, letter.reason, letter.kind.value).inc()
            metrics.MESSAGES.labels(self._group, "dead_lettered").inc()
            log.warning("dead_lettered", reason=letter.reason, kind=letter.kind.value,
                        provider=letter.provider, detail=letter.detail[:300],
                        topic=letter.record.origin.topic,
                        partition=letter.record.origin.partition,
                        offset=letter.record.origin.offset,
                        trace_id=letter.record.header("trace_id"))
        stamps = [r.timestamp_ms for r in records if r.timestamp_ms is not None]
        if stamps:
            metrics.LAST_EVENT_AGE.labels(self._group).set(
                max(0.0, time.time() - max(stamps) / 1000))
