"""paystream processes started by a test on the ports the stack's Prometheus scrapes
(its /api/v1/targets says which), so the live Prometheus sees them as it would see
`paystream run`'s: the ledger group, the health exporter, the finality watcher.

The ledger reads a topic of the test's own (and, when asked, paystream.payments too),
so the test can stop it, flood it with dead letters or leave it lagging without
touching another test's events."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from confluent_kafka import Producer

from paystream import credentials
from paystream.launch import paystream_argv
from paystream.schema.db import connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from tests.support.consumers import (
    create_topic,
    create_users,
    produce,
    producer,
    store_events,
    wire_message,
)
from tests.support.ids import unique
from tests.support.prometheus import LivePrometheus


def as_kafka_admin() -> dict[str, str]:
    """The health exporter describes the test's group: only the admin may."""
    return {"PAYSTREAM_KAFKA_USER": "paystream-admin",
            "PAYSTREAM_KAFKA_PASSWORD_FILE": str(credentials.secrets_dir() / "kafka-admin")}


@dataclass
class Observed:
    """The test's processes, by job name, and the topic, DLQ topic and group they use."""

    live: LivePrometheus
    log_dir: Path
    topic: str = field(default_factory=lambda: unique("obs-pay"))
    dlq_topic: str = field(default_factory=lambda: unique("obs-dlq"))
    group: str = field(default_factory=lambda: unique("obs-ledger"))
    user: str = field(default_factory=lambda: unique("obs-user"))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    ledger_topics: tuple[str, ...] = ()
    _seq: int = 0
    _prod: Producer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def setup(self, *, also_payments: bool = False) -> None:
        from paystream.schema.events import PAYMENTS_TOPIC
        from paystream.stack.kafka import start_group_at_end

        create_topic(self.topic, partitions=3)
        create_topic(self.dlq_topic, partitions=3)
        conn = connect(database_url("owner"))
        with conn, conn.cursor() as cur:
            create_users(cur, [self.user])
        conn.close()
        self.ledger_topics = (self.topic, PAYMENTS_TOPIC) if also_payments else (self.topic,)
        if also_payments:  # only what the test sends, not what earlier tests left
            start_group_at_end(self.group, PAYMENTS_TOPIC)

    def start(self, job: str, args: Sequence[str], env: dict[str, str] | None = None
              ) -> None:
        log = (self.log_dir / f"{job}.log").open("ab")
        self.procs[job] = subprocess.Popen(paystream_argv(*args),
                                           env={**os.environ, **(env or {})},
                                           stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL)
        log.close()

    def start_ledger(self) -> None:
        topics = [a for t in self.ledger_topics for a in ("--topic", t)]
        self.start("ledger", ["consume", "ledger", "--group", self.group, *topics,
                              "--dlq-topic", self.dlq_topic,
                              "--metrics-port", str(self.live.target_port("ledger")),
                              "--session-timeout-ms", "6000", "--backoff-max", "2"],
                   # The hot-path reconcile gauge appears after its first check.
                   {"PAYSTREAM_RECONCILE_INTERVAL_S": "1"})
        self.live.wait_scraped("ledger")

    def start_health(self, env: dict[str, str] | None = None) -> None:
        groups = [a for t in self.ledger_topics for a in ("--group", f"{self.group}={t}")]
        self.start("health", ["health", "--serve-metrics", str(self.live.target_port("health")),
                              "--bind", "127.0.0.1", *groups], {**as_kafka_admin(), **(env or {})})
        self.live.wait_scraped("health")

    def start_finality(self) -> None:
        self.start("finality", ["consume", "finality",
                                "--metrics-port", str(self.live.target_port("finality"))])
        self.live.wait_scraped("finality")

    def stop(self, job: str) -> None:
        proc = self.procs.pop(job)
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop_all(self) -> None:
        for job in list(self.procs):
            self.stop(job)

    def log_tail(self, job: str, lines: int = 30) -> str:
        path = self.log_dir / f"{job}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def events(self, count: int, *, stored: bool = True) -> int:
        """Produce `count` deposits onto the test's topic: recorded in payment_events
        as the outbox would have (applied by the ledger), or not (`stored=False`: the
        ledger dead-letters each as unknown_event)."""
        with self._lock:  # the test and a Trickle both send
            first, self._seq = self._seq + 1, self._seq + count
            if self._prod is None:
                self._prod = producer()
        batch = [PaymentEvent(f"{self.topic}-{n}", EventType.DEPOSIT, self.user, "USD",
                              Decimal("1.5"), "test") for n in range(first, first + count)]
        if stored:
            conn = connect(database_url("owner"))
            with conn, conn.cursor() as cur:
                store_events(cur, batch)
            conn.close()
        return produce(self.topic, (wire_message(e) for e in batch), prod=self._prod)


class Trickle:
    """A background thread that sends `per_second` stored events until stopped: events
    keep arriving while the test breaks something."""

    def __init__(self, observed: Observed, per_second: float) -> None:
        self.observed, self.per_second = observed, per_second
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Trickle:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sent += self.observed.events(1)
            self._stop.wait(max(1 / self.per_second - (time.monotonic() - started), 0))
