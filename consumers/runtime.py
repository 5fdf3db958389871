"""The batch loop every consumer group runs: poll, apply + commit (commit.py), retry.

One thread does everything (librdkafka callbacks run inside consume()), so a rebalance
callback never races a batch: when on_revoke runs, the batch in hand has been either
committed or rolled back.

Transient failures stall the consumer without leaving the group: the batch is rolled
back, every assigned partition is paused, the batch's partitions are rewound to their
first uncommitted offset, and consume() keeps being called (it returns nothing for
paused partitions) so max.poll.interval.ms is never exceeded. After the backoff the
partitions resume and the same messages are read again.

The DLQ limit (too many unexpected failures: consumers/dead_letters/send.py) stops the GROUP rather
than the process: the batch is cut at the failure one over the limit (commit.py: what
came before is committed, that record and the rest are not), a consumer_stops row is
recorded (consumers/stops.py), the consumer leaves the group and stays alive, idle,
serving its metrics, until an operator deletes the row (`paystream consume resume
GROUP`); then it joins again with a fresh window and reads from the committed offsets,
i.e. from the record it stopped at. Exiting instead made `paystream run` restart it
every 2 s into the same batch, forever. A consumer that starts while its group is
stopped waits the same way.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import gc
import os
import signal
import time
from collections.abc import Sequence
from types import FrameType

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from paystream.consumers import metrics, stops
from paystream.consumers.backoff import Backoff
from paystream.consumers.client import (
    consumer_config,
    dlq_producer_config,
    make_consumer,
    make_producer,
)
from paystream.consumers.commit import CommitProtocol, PartitionKey, first_offsets
from paystream.consumers.connection import Database
from paystream.consumers.crash_hooks import CrashHooks
from paystream.consumers.dead_letters.send import (
    DeadLetterProducer,
    DlqLimitExceededError,
    DlqRateLimit,
)
from paystream.consumers.failures import (
    FailureClass,
    FatalError,
    TransientError,
    classify,
    describe,
)
from paystream.consumers.handler import BatchHandler
from paystream.consumers.records import Record, from_message
from paystream.consumers.settings import ConsumerSettings
from paystream.consumers.watchdog import Watchdog

log = structlog.get_logger("consumers.runtime")

EXIT_OK = 0
EXIT_FATAL = 3
# How often a stopped consumer looks for its stop row, and a running one for a stop
# another member of its group recorded.
STOP_POLL_S = 1.0


class BatchConsumer:
    # The Kafka client, created by run(): constructing the runtime does no network work.
    _consumer: Consumer

    def __init__(self, settings: ConsumerSettings, handler: BatchHandler, *,
                 db: Database | None = None, hooks: CrashHooks | None = None) -> None:
        self.settings = settings
        self.handler = handler
        self._db = db or Database(application_name=f"paystream-{settings.group}",
                                  role=handler.db_role)
        self._hooks = hooks or CrashHooks.from_env()
        self._backoff = Backoff(settings.backoff_initial_s, settings.backoff_max_s)
        self._stopping = False
        self._fatal: str | None = None
        self._stall_started: float | None = None
        self._paused: set[PartitionKey] = set()
        self._protocol: CommitProtocol | None = None
        # Set when the DLQ limit trips: (reason, detail) not yet written to consumer_stops
        # (the DB may be what failed); the consumer stays stopped until it is written.
        self._unrecorded_stop: tuple[str, str] | None = None
        self._group_stopped = False
        self._next_stop_check = 0.0
        # Twice max.poll.interval.ms: longer than any bounded step of one iteration.
        self._watchdog = Watchdog(2 * settings.max_poll_interval_ms / 1000, settings.group)

    # -- lifecycle ---------------------------------------------------------------------

    def run(self) -> int:
        """Consume until SIGTERM/SIGINT (or a fatal error); return the exit code. While
        the group is stopped (its DLQ limit), wait outside the group for the resume."""
        s = self.settings
        self._install_signal_handlers()
        _tune_garbage_collector()
        dlq = DeadLetterProducer(make_producer(dlq_producer_config(s)), s.dlq_topic, s.group,
                                 flush_timeout_s=s.max_poll_interval_ms / 1000 / 4)
        metrics.STOPPED.labels(s.group).set(0)
        self._watchdog.start()
        code = EXIT_OK
        try:
            while not self._stopping and not self._fatal:
                self._wait_while_stopped()
                if not self._stopping:
                    self._consume(dlq)
        except FatalError as exc:
            self._fatal = str(exc)
        if self._fatal:
            log.critical("consumer_stopped_fatal", error=self._fatal)
            code = EXIT_FATAL
        dlq.close()
        self._db.close()
        log.info("consumer_closed", group=s.group)
        return code

    def _consume(self, dlq: DeadLetterProducer) -> None:
        """Join the group and consume until stopping, a fatal error or a group stop."""
        s = self.settings
        group = s.group
        self._group_stopped = False
        self._consumer = make_consumer(consumer_config(
            s, stats_cb=functools.partial(metrics.record_statistics, group),
            error_cb=self._on_client_error))
        # A fresh DLQ window on every join: each resume makes progress of at least
        # `dlq_limit` more unexpected failures before the group stops again.
        self._protocol = CommitProtocol(
            group=group, consumer=self._consumer, db=self._db, handler=self.handler,
            dlq=dlq, dlq_limit=DlqRateLimit(s.dlq_limit, s.dlq_window_s),
            commit_budget_s=s.commit_retry_budget_s, hooks=self._hooks)
        self._consumer.subscribe(list(s.topics), on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_lost)
        log.info("consumer_started", group=group, topics=list(s.topics),
                 batch_size=s.batch_size, dlq_topic=s.dlq_topic)
        try:
            self._loop()
        finally:
            self._close_consumer()

    def _loop(self) -> None:
        assert self._protocol is not None
        while not self._stopping and not self._fatal and not self._group_stopped:
            self._watchdog.beat()
            if self._protocol.pending:
                self._protocol.commit_pending()
            records = self._records(self._next_batch())
            if records:
                self._process(records)
            if self._stall_started is None and not self._group_stopped:
                # Between batches, never while a failure is retried (see BatchHandler).
                self.handler.after_batch(self._db.connection)
                self._notice_group_stop()

    def _next_batch(self) -> list[Message]:
        """What the client has already fetched, handed over at once; when it has nothing,
        the first record to arrive (waiting up to batch_timeout_s) and whatever came with
        it. consume(n, timeout) alone waits for n records or the timeout, so at low rates
        every batch waited the full timeout (p50 202 ms webhook -> applied with 0.5 s).
        Under load the client keeps fetching while a batch is applied, so the next call
        finds a full queue and batches stay large."""
        s = self.settings
        messages = self._consumer.consume(s.batch_size, 0)
        if messages:
            return messages
        first = self._consumer.consume(1, s.batch_timeout_s)
        if not first or s.batch_size == 1:
            return first
        return first + self._consumer.consume(s.batch_size - 1, 0)

    def _close_consumer(self) -> None:
        # close() leaves the group; its on_revoke commits whatever is still pending.
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.warning("consumer_close_failed", error=str(exc))

    # -- the group's stop (its DLQ limit) ------------------------------------------------

    def _stop_group(self, exc: DlqLimitExceededError) -> None:
        """The DLQ limit cut the batch just committed: record the stop and leave
        the group (_consume closes the client). Leaving rather than holding the
        partitions paused: there is nothing to heartbeat for while a person looks, no
        max.poll.interval.ms to keep, and the committed offsets already say where to
        resume (from the record it stopped at, no seek needed); another member
        that gets the partitions sees the row within STOP_POLL_S and leaves too."""
        self._group_stopped = True
        self._unrecorded_stop = (stops.DLQ_LIMIT_EXCEEDED, str(exc))
        self._record_stop()

    def _record_stop(self) -> None:
        if self._unrecorded_stop is None:
            return
        reason, detail = self._unrecorded_stop
        try:
            conn = self._db.connection()
            with conn.cursor() as cur:
                stops.record(cur, self.settings.group, reason, detail)
            conn.commit()
        except Exception as exc:  # the DB may be what broke: stay stopped, retry later
            self._db.rollback_quietly()
            log.error("consumer_stop_not_recorded", group=self.settings.group,
                      error=describe(exc))
            return
        self._unrecorded_stop = None

    def _read_stop(self) -> stops.Stop | None:
        """The group's stop row; None when there is none or it cannot be read (the batch
        path then meets the same broken database and stalls on it, as before)."""
        try:
            conn = self._db.connection()
            with conn.cursor() as cur:
                found = stops.of_group(cur, self.settings.group)
            conn.rollback()
        except Exception as exc:
            self._db.rollback_quietly()
            log.warning("consumer_stop_unreadable", group=self.settings.group,
                        error=describe(exc))
            return None
        return found

    def _notice_group_stop(self) -> None:
        """Between batches, about once a second: leave if another member (or an
        earlier run) stopped the group."""
        now = time.monotonic()
        if now < self._next_stop_check:
            return
        self._next_stop_check = now + STOP_POLL_S
        if self._read_stop() is not None:
            self._group_stopped = True

    def _wait_while_stopped(self) -> None:
        """Outside the group, idle, while the group is stopped; return once resumed."""
        group = self.settings.group
        stopped_since: float | None = None
        while not self._stopping:
            self._watchdog.beat()
            self._record_stop()
            stop = self._read_stop()
            if stop is None and self._unrecorded_stop is None:
                break
            if stopped_since is None:
                stopped_since = time.monotonic()
                metrics.STOPPED.labels(group).set(1)
                log.critical("consumer_group_stopped", group=group,
                             reason=stop.reason if stop else stops.DLQ_LIMIT_EXCEEDED,
                             detail=stop.detail if stop else str(self._unrecorded_stop),
                             resume=stops.resume_command(group))
            time.sleep(STOP_POLL_S)
        if stopped_since is not None:
            metrics.STOPPED.labels(group).set(0)
            log.warning("consumer_group_resumed", group=group,
                        stopped_for_s=round(time.monotonic() - stopped_since, 1))

    def _install_signal_handlers(self) -> None:
        def on_signal(signum: int, _frame: FrameType | None) -> None:
            if self._stopping:
                # Second signal: leave now. The open DB transaction dies with the
                # connection; uncommitted offsets are redelivered to the next owner.
                os._exit(128 + signum)
            self._stopping = True
            log.info("consumer_stopping", signal=signal.Signals(signum).name)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        # kill -USR1 <pid> prints every thread's stack: where a slow shutdown waits.
        faulthandler.register(signal.SIGUSR1, all_threads=True)

    # -- one batch ---------------------------------------------------------------------

    def _records(self, messages: Sequence[Message]) -> list[Record]:
        records = []
        for message in messages:
            err = message.error()
            if err is None:
                records.append(from_message(message))
            elif err.fatal():
                raise FatalError(f"fatal consumer error: {err}")
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consume_error", error=str(err))
        return records

    def _process(self, records: list[Record]) -> None:
        assert self._protocol is not None
        group = self.settings.group
        metrics.BATCH_SIZE.labels(group).observe(len(records))
        try:
            result = self._protocol.process(records)
        except DlqLimitExceededError as exc:
            # process() committed the records before the cut, nothing from it on; the
            # group stops (and is resumed) as one.
            if self._stall_started is not None:
                self._end_stall()
            self._stop_group(exc)
            return
        except Exception as exc:
            failure = classify(exc)
            if failure is FailureClass.FATAL:
                raise FatalError(describe(exc)) from exc
            if failure is FailureClass.DETERMINISTIC:
                # Not isolated by the handler (e.g. raised at COMMIT): retry like a
                # transient failure rather than skip; the stall metric makes it visible.
                log.error("batch_failed_unexpectedly", error=describe(exc))
            self._stall(records, exc, failure)
            return
        if self._stall_started is not None:
            self._end_stall()
        log.info("batch_committed", size=len(records), outcomes=dict(result.outcomes))

    # -- stalls (transient failures) -----------------------------------------------------

    def _stall(self, records: Sequence[Record], exc: BaseException,
               failure: FailureClass) -> None:
        group = self.settings.group
        metrics.RETRIES.labels(group, _retry_kind(exc, failure)).inc()
        now = time.time()
        if self._stall_started is None:
            self._stall_started = now
            metrics.STALLED.labels(group).set(1)
            metrics.STALL_STARTED.labels(group).set(now)
        delay = self._backoff.next_delay()
        log.error("consumer_stalled", error=describe(exc), retry_in_s=round(delay, 3),
                  stalled_for_s=round(now - self._stall_started, 1),
                  attempt=self._backoff.attempt, batch_size=len(records))
        self._pause_all()
        self._rewind(records)
        self._keep_polling(delay)
        self._resume_all()

    def _end_stall(self) -> None:
        assert self._stall_started is not None
        group = self.settings.group
        log.warning("consumer_recovered", stalled_for_s=round(time.time() - self._stall_started, 1))
        self._stall_started = None
        self._backoff.reset()
        metrics.STALLED.labels(group).set(0)
        metrics.STALL_STARTED.labels(group).set(0)

    def _rewind(self, records: Sequence[Record]) -> None:
        """Seek each partition of the rolled-back batch back to its first offset."""
        for (topic, partition), offset in first_offsets(records).items():
            try:
                self._consumer.seek(TopicPartition(topic, partition, offset))
            except KafkaException as exc:
                # Revoked meanwhile: its new owner starts from the committed offset.
                log.info("rewind_skipped", topic=topic, partition=partition, error=str(exc))

    def _keep_polling(self, delay_s: float) -> None:
        """Wait out the backoff inside consume(): heartbeats, callbacks, poll deadline."""
        deadline = time.monotonic() + delay_s
        while not self._stopping and not self._fatal:
            self._watchdog.beat()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._pause_all()  # partitions assigned during the stall are paused too
            stray = self._records(self._consumer.consume(
                self.settings.batch_size, min(remaining, self.settings.poll_keepalive_s)))
            if stray:
                # Fetched before the pause took effect: read them again after resuming.
                self._rewind(stray)

    def _pause_all(self) -> None:
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.pause(assignment)
        self._paused = {(tp.topic, tp.partition) for tp in assignment}
        metrics.PAUSED_PARTITIONS.labels(self.settings.group).set(len(self._paused))

    def _resume_all(self) -> None:
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.resume(assignment)
        self._paused = set()
        metrics.PAUSED_PARTITIONS.labels(self.settings.group).set(0)

    # -- rebalance callbacks (run inside consume()) -------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        metrics.REBALANCES.labels(self.settings.group, "assign").inc()
        if partitions:
            # librdkafka keeps a partition's paused flag across lost/assign: a partition
            # lost while a stall had it paused would come back paused and never be read
            # (seen in the chaos run after a broker restart). New partitions start
            # resumed; a stall in progress pauses them again on its next poll.
            with contextlib.suppress(KafkaException):
                consumer.resume(partitions)
        log.info("partitions_assigned", partitions=_names(partitions))

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        metrics.REBALANCES.labels(self.settings.group, "revoke").inc()
        keys = [(tp.topic, tp.partition) for tp in partitions]
        if self._protocol is not None:
            # Completed work only: the batch in hand is committed or rolled back by now.
            self._protocol.commit_pending(keys, budget_s=self.settings.revoke_commit_budget_s)
            # What could not be committed in time is left to the new owner (it redelivers
            # and the replay is a no-op); committing it later could move its offset.
            self._protocol.forget(keys)
        self._drop_partitions(keys)
        log.info("partitions_revoked", partitions=_names(partitions))

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        metrics.REBALANCES.labels(self.settings.group, "lost").inc()
        keys = [(tp.topic, tp.partition) for tp in partitions]
        if self._protocol is not None:
            # Someone else may already own them: committing now could move their offset.
            self._protocol.forget(keys)
        self._drop_partitions(keys)
        log.warning("partitions_lost", partitions=_names(partitions))

    def _drop_partitions(self, keys: list[PartitionKey]) -> None:
        group = self.settings.group
        for topic, partition in keys:
            self._paused.discard((topic, partition))
            with contextlib.suppress(KeyError):
                metrics.CONSUMER_LAG.remove(group, topic, str(partition))
        metrics.PAUSED_PARTITIONS.labels(group).set(len(self._paused))

    def _on_client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = f"fatal client error: {err}"
        else:
            log.warning("kafka_client_error", error=str(err))


# Allocations between two passes of the cyclic garbage collector's youngest generation.
GC_THRESHOLD = (50_000, 50, 100)


def _tune_garbage_collector() -> None:
    """A batch allocates a few dozen objects per record, all freed by reference counting
    when it ends; at the default threshold (700 allocations) the cyclic collector ran a
    pass every few records, and its older generations walked every object the process
    had loaded: ~15 % of the ledger's Python CPU (bench-ledger). What was loaded at start
    is frozen out of the collector's sight, and passes come every ~50,000 allocations."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def _retry_kind(exc: BaseException, failure: FailureClass) -> str:
    """Label for the retries metric: the failure class and where it came from."""
    if type(exc).__module__.startswith("psycopg2"):
        source = "db"
    elif isinstance(exc, KafkaException):
        source = "broker"
    elif isinstance(exc, TransientError):
        source = "dlq"
    else:
        source = "other"
    return f"{failure}_{source}"


def _names(partitions: list[TopicPartition]) -> list[str]:
    return [f"{tp.topic}[{tp.partition}]" for tp in partitions]
