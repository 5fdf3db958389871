"""Signed traffic through ingests behind a round-robin balancer, the longest lock wait
on the ingest's tables, and what the books made of the deposits answered 2xx: the kit of
an upgrade under traffic (bench/upgrade_bench.py, tests/integration/
test_upgrade_under_traffic.py)."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

from paystream.schema.db import connect, database_url
from tests.support.ingest import payment_body, payment_headers

INGEST_TABLES = ("payment_events", "event_status", "outbox", "refused_deliveries")


@dataclass
class Answer:
    at: float
    status: int | None  # None: no ingest answered (every one refused the connection)
    latency_ms: float
    event_id: str


@dataclass
class Sender:
    """Signed deposits at a fixed rate to the ingests the balancer lists."""

    users: list[str]
    rate: float
    urls: list[str] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        turn = itertools.count()
        with ThreadPoolExecutor(32) as pool, httpx.Client(timeout=10) as http:
            began = time.monotonic()
            for n in itertools.count():
                if self.stop.is_set():
                    break
                pause = began + n / self.rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                pool.submit(self._send, http, next(turn), self.users[n % len(self.users)])

    def _send(self, http: httpx.Client, turn: int, user: str) -> None:
        event_id = f"{user}-{uuid.uuid4().hex[:12]}"
        body = payment_body(event_id, user, "1.25")
        started = time.monotonic()
        status = None
        urls = list(self.urls)
        for url in urls[turn % len(urls):] + urls[:turn % len(urls)]:
            try:
                status = http.post(f"{url}/webhooks/payments", content=body,
                                   headers=payment_headers(body)).status_code
                break
            except httpx.TransportError:
                continue  # the balancer tries the next ingest
        with self._lock:
            self.answers.append(Answer(started, status,
                                       (time.monotonic() - started) * 1000, event_id))


class LockSampler:
    """The longest wait for a lock on the ingest's tables, read every 50 ms."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self.where = ""
        self.stop = threading.Event()

    def run(self) -> None:
        conn = connect(database_url("owner"), application_name="bench-upgrade-locks")
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                while not self.stop.wait(0.05):
                    cur.execute(
                        "SELECT extract(epoch FROM now() - l.waitstart), c.relname"
                        " FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
                        " WHERE NOT l.granted AND c.relname = ANY(%s)"
                        " ORDER BY 1 DESC NULLS LAST LIMIT 1", (list(INGEST_TABLES),))
                    row = cur.fetchone()
                    if row and row[0] is not None and float(row[0]) > self.longest_s:
                        self.longest_s, self.where = float(row[0]), row[1]
        finally:
            conn.close()


def books(answers: list[Answer]) -> tuple[int, int]:
    """(lost, double) among the deposits answered 2xx."""
    accepted = [a.event_id for a in answers if a.status is not None and a.status < 300]
    conn = connect(database_url("owner"), application_name="bench-upgrade-check")
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT e, count(t.transfer_id) FROM unnest(%s::text[]) AS e"
                        " LEFT JOIN transfers t ON t.source_event_id = e GROUP BY e",
                        (accepted,))
            counts = dict(cur.fetchall())
    finally:
        conn.close()
    return (sum(1 for n in counts.values() if n == 0),
            sum(1 for n in counts.values() if n > 1))


def wait_applied(answers: list[Answer], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lost, _ = books(answers)
        if lost == 0:
            return
        time.sleep(1)


def longest_503_run(answers: list[Answer]) -> float:
    """The longest run of consecutive 503s, in seconds from its first to its last."""
    longest, start, last = 0.0, None, None
    for a in sorted(answers, key=lambda a: a.at):
        if a.status == 503:
            start = a.at if start is None else start
            last = a.at
            longest = max(longest, last - start)
        else:
            start = None
    return longest


