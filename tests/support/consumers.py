"""Driving consumer groups from the integration tests and the benchmark.

Topics, raw wire-format messages, consumer processes, and the offsets a group has
committed: everything here talks to the real broker and database, nothing is mocked.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from paystream import kafka_security
from paystream.consumers.ledger.plan import decide, signed_amount
from paystream.consumers.records import Origin, Record
from paystream.kafka_nodes import kafka_bootstrap
from paystream.launch import paystream_argv
from paystream.schema.events import EventType, PaymentEvent, parse_wire, wire_hash
from tests.support.waiting import wait_until

Message = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]  # key, value, headers


def admin_security() -> dict[str, str]:
    """The tests' Kafka clients are the admin (topics of their own, any group)."""
    return kafka_security.client_config(kafka_security.ADMIN)


def admin() -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap(), **admin_security()})


def create_topic(name: str, partitions: int = 12) -> None:
    """Create a topic (the broker's default replication: 3 on a cluster) and wait until
    every partition has a leader."""
    client = admin()  # keep a reference: a collected client cancels its futures
    futures = client.create_topics([NewTopic(name, partitions, -1)], operation_timeout=30)
    try:
        futures[name].result(timeout=30)
    except KafkaException as exc:
        raise AssertionError(f"cannot create topic {name} at {kafka_bootstrap()}: {exc}; "
                             "is the stack up (`paystream stack up`)?") from exc

    def ready() -> bool:
        try:
            return len(end_offsets(name)) == partitions
        except KafkaException:  # leaders not elected yet
            return False

    wait_until(ready, 30, f"topic {name} ready")


def wire_message(event: PaymentEvent, trace_id: str | None = None) -> Message:
    """The record Debezium's Event Router would produce for this event."""
    headers = [("id", os.urandom(8).hex().encode()), ("event_id", event.event_id.encode()),
               ("event_type", event.event_type.value.encode()),
               ("trace_id", (trace_id or "trace-" + event.event_id).encode())]
    value = json.dumps(event.to_wire(), separators=(",", ":")).encode()
    return event.user_id.encode(), value, headers


def record_of(message: Message, partition: int = 0, offset: int = 0,
              topic: str = "paystream.payments") -> Record:
    """The Record a consumer would hand the ledger for `message` (wire_message's)."""
    key, value, headers = message
    return Record(Origin(topic, partition, offset), key, value, tuple(headers), None)


def store_events(cur: Any, events: Iterable[PaymentEvent]) -> int:
    """Record `events` in payment_events as the ingest does (schema.outbox.write_events:
    the same columns, the wire as payload, PaymentEvent.content_hash, and the event's
    `received` row in event_status, in the same statement),
    without the outbox row: the tests and the bench then produce the records themselves
    (wire_message), on topics of their own. The ledger credits only records that match
    such a row. An event id already stored is left as it is; returns how many were new."""
    rows = []
    for event in events:
        wire = event.to_wire()
        rows.append({"event_id": event.event_id, "provider": event.provider,
                     "event_type": wire["event_type"], "user_id": event.user_id,
                     "asset": event.asset, "amount": wire["amount"],
                     "content_hash": wire_hash(wire), "trace_id": "trace-" + event.event_id,
                     "payload": wire})
    stored = 0
    for start in range(0, len(rows), 5_000):
        cur.execute(
            "WITH e AS (INSERT INTO payment_events (event_id, provider, event_type, user_id,"
            " asset, amount, content_hash, trace_id, payload) SELECT event_id, provider,"
            " event_type, user_id, asset, amount, content_hash, trace_id, payload"
            " FROM jsonb_to_recordset(%s::jsonb) AS r(event_id text, provider text,"
            " event_type text, user_id text, asset text, amount numeric, content_hash text,"
            " trace_id text, payload jsonb) ON CONFLICT (event_id) DO NOTHING"
            " RETURNING event_id) INSERT INTO event_status (event_id) SELECT event_id FROM e",
            (json.dumps(rows[start:start + 5_000], separators=(",", ":")),))
        stored += cur.rowcount
    return stored


def store_records(cur: Any, records: Iterable[Record]) -> int:
    """store_events for the events that records built by hand carry (their values as the
    outbox would have written them)."""
    return store_events(cur, (parse_wire(json.loads(r.value or b"")) for r in records))


def producer() -> Producer:
    return Producer({"bootstrap.servers": kafka_bootstrap(), **admin_security(),
                     "linger.ms": 20,
                     "enable.idempotence": True, "acks": "all",
                     "batch.num.messages": 10000, "queue.buffering.max.messages": 500000})


def produce(topic: str, messages: Iterable[Message], partition: int | None = None,
            prod: Producer | None = None) -> int:
    """Produce and wait for every acknowledgement; return how many were sent."""
    prod = prod or producer()
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    sent = 0
    for key, value, headers in messages:
        extra = {} if partition is None else {"partition": partition}
        while True:
            try:
                prod.produce(topic, key=key, value=value, headers=headers,
                             on_delivery=report, **extra)
                break
            except BufferError:
                prod.poll(0.05)
        sent += 1
        prod.poll(0)
    left = prod.flush(60)
    if left or errors:
        raise AssertionError(f"produce to {topic} failed: {left} unacked, errors {errors[:3]}")
    return sent


def _probe(group: str = "paystream-harness-probe") -> Consumer:
    return Consumer({"bootstrap.servers": kafka_bootstrap(), **admin_security(),
                     "group.id": group, "enable.auto.commit": False,
                     "enable.auto.offset.store": False})


class OffsetProbe:
    """One client kept open for many offset reads.

    Every new client authenticates with SCRAM, whose PBKDF2 costs milliseconds of CPU
    on both ends: a bench polling offsets through a new client each time bills that to
    the broker it measures, and takes it from the processes under test."""

    def __init__(self, group: str = "paystream-harness-probe") -> None:
        self._consumer = _probe(group)

    def end_offsets(self, topic: str) -> dict[int, int]:
        """High watermark per partition."""
        meta = self._consumer.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        return {p: self._consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in meta.partitions}

    def committed(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """The probe's group's committed offset per partition (-1001 = none yet)."""
        result = self._consumer.committed([TopicPartition(topic, p) for p in partitions],
                                          timeout=10)
        return {tp.partition: tp.offset for tp in result}

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> OffsetProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def end_offsets(topic: str) -> dict[int, int]:
    """High watermark per partition."""
    with OffsetProbe() as probe:
        return probe.end_offsets(topic)


def committed(group: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    """The group's committed offset per partition (-1001 = none yet)."""
    with OffsetProbe(group) as probe:
        return probe.committed(topic, partitions)


def start_at_end(group: str, topic: str) -> None:
    """Commit `group`'s offsets at `topic`'s current end: a consumer of that group
    started later reads only what is produced after this call (a shared topic such as
    paystream.notifications holds every earlier test's records)."""
    ends = end_offsets(topic)
    c = _probe(group)
    try:
        c.commit(offsets=[TopicPartition(topic, p, end) for p, end in ends.items()],
                 asynchronous=False)
    finally:
        c.close()


def drained(group: str, topic: str) -> bool:
    ends = end_offsets(topic)
    done = committed(group, topic, ends)
    return all(done.get(p, -1) >= end for p, end in ends.items() if end > 0)


def read_all(topic: str, timeout_s: float = 10.0) -> list[Any]:
    """Every message currently on `topic` (for checking a DLQ topic)."""
    ends = end_offsets(topic)
    total = sum(ends.values())
    c = _probe()
    c.assign([TopicPartition(topic, p, 0) for p in ends])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < total and time.monotonic() < deadline:
            out.extend(m for m in c.consume(1000, 0.5) if m.error() is None)
    finally:
        c.close()
    return out


@dataclass
class ConsumerProcess:
    """One `paystream consume ...` process, its log in a file."""

    proc: subprocess.Popen
    log_path: Path

    @classmethod
    def start(cls, kind: str, *, topic: str, group: str, dlq_topic: str, log_dir: Path,
              extra_args: Sequence[str] = (), env: dict[str, str] | None = None,
              name: str | None = None, wrap: Sequence[str] = ()) -> ConsumerProcess:
        """`wrap`: a command the consumer's argv is appended to (e.g. a namespace of its
        own, tests/support/hosts.py)."""
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name or group}-{time.monotonic_ns()}.log"
        args = [*wrap, *paystream_argv("consume", kind, "--topic", topic,
                              "--group", group, "--dlq-topic", dlq_topic, "--metrics-port", "0",
                              "--session-timeout-ms", "6000", "--max-poll-interval-ms", "30000",
                              "--backoff-max", "2", *extra_args)]
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **(env or {})})
        return cls(proc, log_path)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, timeout_s: float = 70) -> int:
        # A clean stop leaves the group, and leaving waits for a rebalance in progress:
        # the broker ends it within max.poll.interval.ms (30 s here) when a slow member
        # does not rejoin (seen in CI under load). The watchdog bounds the whole stop at
        # 2 x max.poll.interval.ms (exit 4, stacks dumped), so 70 s sees either outcome.
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            # Where it waits: the consumer prints its threads' stacks on SIGUSR1.
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1.0)
            raise AssertionError(f"still running {timeout_s} s after SIGTERM:\n"
                                 f"{self.tail(80)}") from None

    def kill(self) -> int:
        if self.alive():
            self.proc.kill()
        return self.proc.wait(10)

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout_s)

    def log_lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"event": "raw", "text": line})
        return out

    def events(self, name: str) -> list[dict[str, Any]]:
        return [entry for entry in self.log_lines() if entry.get("event") == name]

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class ProcessPool:
    """Consumer processes of one test; `kill_all` leaves none behind."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: list[ConsumerProcess] = []

    def start(self, kind: str, **kwargs: Any) -> ConsumerProcess:
        proc = ConsumerProcess.start(kind, log_dir=self.log_dir, **kwargs)
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            proc.kill()

    def logs(self, lines: int = 20) -> str:
        return "\n".join(f"--- {p.log_path.name} (rc={p.proc.poll()})\n{p.tail(lines)}"
                         for p in self.procs)


def create_users(cur: Any, user_ids: Iterable[str]) -> None:
    cur.execute("INSERT INTO users (user_id) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING",
                (list(user_ids),))


def make_events(prefix: str, users: Sequence[str], count: int, *, seed: int = 1,
                withdraw_share: float = 0.3) -> list[PaymentEvent]:
    """A mixed stream: each user starts with a deposit, then deposits, airdrops,
    withdrawals and fees, some withdrawals larger than the balance."""
    rng = random.Random(seed)
    out: list[PaymentEvent] = []
    for i in range(count):
        user = users[i % len(users)]
        if i < len(users) or rng.random() >= withdraw_share:
            kind = EventType.AIRDROP if rng.random() < 0.05 else EventType.DEPOSIT
            amount = Decimal(rng.randint(1, 10_000)) / 100
        else:
            kind = EventType.WITHDRAWAL_FEE if rng.random() < 0.15 else EventType.WITHDRAWAL
            amount = Decimal(rng.randint(1, 15_000)) / 100
        out.append(PaymentEvent(f"{prefix}-{i}", kind, user, "USDC", amount, "test"))
    return out


def expected_ledger(events: Sequence[PaymentEvent]) -> tuple[dict[str, Decimal], dict[str, str]]:
    """What applying `events` once each, in order, must give: balances and outcomes."""
    balances: dict[str, Decimal] = {}
    outcomes: dict[str, str] = {}
    for event in events:
        available = balances.get(event.user_id, Decimal(0))
        outcome = decide(event, available)
        outcomes[event.event_id] = outcome.value
        if outcome.value == "applied":
            balances[event.user_id] = available + signed_amount(event)
        else:
            balances.setdefault(event.user_id, available)
    return balances, outcomes


def assert_applied_exactly_once(cur: Any, events: Sequence[PaymentEvent]) -> None:
    """Every event processed once with the outcome of an in-order, once-each apply."""
    balances, outcomes = expected_ledger(events)
    ids = [e.event_id for e in events]
    users = sorted({e.user_id for e in events})
    cur.execute("SELECT event_id, outcome FROM processed_events WHERE event_id = ANY(%s)",
                (ids,))
    rows = cur.fetchall()
    assert len(rows) == len(ids), f"{len(rows)} processed_events rows for {len(ids)} events"
    got = dict(rows)
    wrong = [(i, got.get(i), outcomes[i]) for i in ids if got.get(i) != outcomes[i]]
    assert not wrong, f"{len(wrong)} outcomes differ from in-order apply, e.g. {wrong[:3]}"
    cur.execute("SELECT source_event_id, count(*) FROM transfers"
                " WHERE source_event_id = ANY(%s) GROUP BY 1 HAVING count(*) > 1", (ids,))
    assert cur.fetchall() == []
    cur.execute("SELECT count(*) FROM user_entries WHERE book = 'available'"
                " AND source_event_id = ANY(%s)", (ids,))
    assert cur.fetchone()[0] == sum(1 for o in outcomes.values() if o == "applied")
    # Double entry: each of these transfers balances (user side + platform side).
    cur.execute("SELECT t.source_event_id FROM transfers t JOIN postings p USING (transfer_id)"
                " WHERE t.source_event_id = ANY(%s) GROUP BY t.transfer_id, t.source_event_id"
                " HAVING sum(p.amount) <> 0 OR count(*) < 2", (ids,))
    assert cur.fetchall() == []
    cur.execute("SELECT user_id, balance FROM balances WHERE user_id = ANY(%s)", (users,))
    actual = dict(cur.fetchall())
    mismatched = [(u, actual.get(u), balances[u]) for u in users
                  if actual.get(u, 0) != balances[u]]
    assert not mismatched, f"balances differ: {mismatched[:3]}"
