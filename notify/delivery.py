"""The sender: delivers the claimed delivery slots as Standard-Webhooks-signed POSTs.

Design (docs/notifications.md tells the same story with the failure scenarios):
  1. The notifier consumer (consumers/notifier.py, group `notifier`) only records: each
     intent of paystream.notifications and one slot per (intent, endpoint) that wants it,
     INSERT ... ON CONFLICT DO NOTHING, in the batch transaction; the offsets are
     committed after it (consumers/commit.py). Nothing is sent from the poll thread, so a
     slow endpoint can never hold up a partition or the consumer's group membership.
  2. The sender (this module: a thread of `paystream consume notifier`, or its own
     process, `paystream notify deliver`, for more senders) claims due slots in one
     statement: FOR UPDATE SKIP LOCKED, a lease (claimed_until, claim_id), the attempt
     counted; it COMMITS the claim before sending anything (store.claim). At most
     PAYSTREAM_NOTIFY_PER_ENDPOINT slots of one endpoint are in flight in a process, so a
     hanging endpoint fills its own slots and no other's.
  3. Each claimed slot is sent asynchronously (aiohttp, one pool for all endpoints, the
     whole attempt bounded by PAYSTREAM_NOTIFY_TIMEOUT_S), signed over the intent's body
     with webhook-id = the intent id, on every attempt of every sender.
  4. The answers are recorded together (store.record): every attempt, then each slot's
     new state only while its claim_id is still ours; delivered, failed for good (a 4xx
     other than 408/429, or the schedule spent), or pending again at the next step of the
     schedule (schedule.py). The endpoint's failing run is tracked and an endpoint failing
     for PAYSTREAM_NOTIFY_DISABLE_AFTER_S is disabled (a metric and an error line say so).
A sender killed between 2 and 3 or between 3 and 4 leaves a claimed slot; its lease
lapses and the next claim sends again, with the same webhook-id: receivers see a
duplicate of the same id at worst, never the same intent under two ids. The lease is at
least twice the attempt's timeout, so a live sender records before its lease lapses.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from collections import Counter
from datetime import UTC, datetime

import aiohttp
import psycopg2
import structlog
import uvloop

from paystream import standard_webhooks
from paystream.notify import metrics, store
from paystream.notify.address_guard import AddressRefused, GuardedResolver, ResolvedInside
from paystream.notify.crash_hooks import SenderCrashHooks
from paystream.notify.schedule import Verdict, judge, retry_delay
from paystream.notify.settings import NotifySettings
from paystream.schema.db import Connection, connect, database_url

log = structlog.get_logger("notify.delivery")

USER_AGENT = "paystream-notifier/1"
# The answers' status line is all a delivery needs: the body is never read.
_ERROR_TEXT_MAX = 300
HEAD_BYTES = 256  # of each answer, kept with its attempt (the merchant's delivery log)
# The recorder waits this long for answers to gather unless this many are there already:
# small next to the lease (an answer is recorded long before it lapses) and to the
# intent-to-delivery target (1 s).
_RECORD_GATHER_S = 0.02
_RECORD_BATCH = 64


class Sender:
    def __init__(self, settings: NotifySettings, *, hooks: SenderCrashHooks | None = None,
                 rng: random.Random | None = None) -> None:
        self.settings = settings
        self._guard = settings.guard()
        self._hooks = hooks or SenderCrashHooks.from_env()
        self._rng = rng or random.Random()
        self._busy: Counter[str] = Counter()
        self._in_flight = 0
        self._answers: list[store.Answer] = []
        # Set by the attempts that end: capacity freed (claim more), an answer to record.
        self._freed, self._answered = asyncio.Event(), asyncio.Event()
        self._freed_since_claim = 0
        self._claim_when_freed = 1
        # One connection per loop, so a claim never waits for a record nor the other way.
        self._conns: dict[str, Connection] = {}

    def run(self, stop: threading.Event) -> None:
        """Deliver until `stop` is set; the attempts in flight then finish (each within
        its timeout) and are recorded."""
        # uvloop: the event loop's own overhead is a third of the sender's CPU otherwise.
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self._run(stop))

    async def _run(self, stop: threading.Event) -> None:
        s = self.settings
        tasks: set[asyncio.Task[None]] = set()
        # The SSRF guard at send time: names resolve through it, so the connection goes
        # to a checked address (a literal address is checked in _attempt).
        connector = aiohttp.TCPConnector(limit=s.max_in_flight, limit_per_host=0,
                                         resolver=GuardedResolver(self._guard))
        async with aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=s.timeout_s),
                cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False) as client:
            sending = asyncio.Event()
            sending.set()
            # Step 4 runs beside steps 2 and 3: answers are recorded while the next
            # slots are claimed and sent.
            recorder = asyncio.create_task(self._recording(sending))
            while not stop.is_set():
                # Cleared before the claim: an attempt ending meanwhile counts.
                self._freed.clear()
                self._freed_since_claim = 0
                # Step 2: claim what is due, within the capacity left.
                claims = await self._claim(s.max_in_flight - self._in_flight)
                # Step 3: send each, concurrently.
                for c in claims:
                    self._busy[c.endpoint_id] += 1
                    self._in_flight += 1
                    task = asyncio.create_task(self._attempt(client, c))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                metrics.IN_FLIGHT.set(self._in_flight)
                # Look again once half of what is in flight has ended (a claim per
                # attempt would cost a transaction per attempt under load; at a low rate
                # that is the first to end), or after a while when nothing is in flight.
                self._claim_when_freed = max(1, self._in_flight // 2)
                await _wait(self._freed if self._in_flight else None, s.poll_s, stop)
            if tasks:
                await asyncio.wait(tasks)
            sending.clear()
            self._answered.set()
            await recorder
        for conn in self._conns.values():
            conn.close()

    async def _recording(self, sending: asyncio.Event) -> None:
        """Step 4, a loop of its own: record every answer, in batches of whatever ended
        since the last; after the sending stopped, until nothing is left."""
        while sending.is_set() or self._answers:
            await self._answered.wait()
            if sending.is_set() and len(self._answers) < _RECORD_BATCH:
                # A moment for more answers to join: a transaction per answer would cost
                # Postgres more than the answers themselves (a commit, a plan).
                await asyncio.sleep(_RECORD_GATHER_S)
            self._answered.clear()
            if not await self._record() and not sending.is_set():
                return  # stopping with the database away: the leases lapse, resent later

    def _connection(self, role: str) -> Connection:
        conn = self._conns.get(role)
        if conn is None or conn.closed:
            conn = self._conns[role] = connect(
                database_url("notifier"), application_name=f"paystream-notify-{role}")
        return conn

    async def _claim(self, capacity: int) -> list[store.Claim]:
        s = self.settings
        if capacity <= 0:
            return []
        busy = {e: n for e, n in self._busy.items() if n > 0}
        try:
            claims = await asyncio.to_thread(
                lambda: store.claim(self._connection("claim"), busy,
                                    per_endpoint=s.per_endpoint, limit=capacity,
                                    lease_s=s.lease_s))
        except psycopg2.Error as exc:
            self._lost_connection("claim", exc)
            await asyncio.sleep(min(1.0, s.poll_s * 5))
            return []
        self._hooks.after_claim(len(claims))
        return claims

    async def _record(self) -> bool:
        """Record the answers so far; False if the database refused them (kept)."""
        if not self._answers:
            return True
        answers, self._answers = self._answers, []
        try:
            recorded = await asyncio.to_thread(
                lambda: store.record(self._connection("record"), answers,
                                     disable_after_s=self.settings.disable_after_s))
        except psycopg2.Error as exc:
            # Kept for the next turn: an answer is recorded late rather than never (its
            # lease may lapse meanwhile: then the slot is sent again, same webhook-id).
            self._answers = answers + self._answers
            self._lost_connection("record", exc)
            await asyncio.sleep(min(1.0, self.settings.poll_s * 5))
            self._answered.set()
            return False
        metrics.LOST_CLAIMS.inc(recorded.lost)
        for endpoint_id, url in recorded.disabled:
            metrics.ENDPOINTS_DISABLED.labels(endpoint_id).inc()
            log.error("endpoint_disabled", endpoint_id=endpoint_id, url=url,
                      failing_for_s=self.settings.disable_after_s)
        return True

    def _lost_connection(self, role: str, exc: psycopg2.Error) -> None:
        log.warning("notify_database_error", step=role, error=str(exc).strip()[:300])
        conn = self._conns.pop(role, None)
        if conn is not None:
            with contextlib.suppress(psycopg2.Error):
                conn.close()

    async def _attempt(self, client: aiohttp.ClientSession, claim: store.Claim) -> None:
        s = self.settings
        started_at = datetime.now(UTC)
        t0 = time.perf_counter()
        headers = standard_webhooks.headers(claim.intent_id, int(time.time()), claim.body,
                                            claim.secrets)
        headers["content-type"] = "application/json"
        headers["user-agent"] = USER_AGENT
        status: int | None = None
        error: str | None = None
        head: str | None = None
        try:
            self._guard.check_scheme_and_literal(claim.url)
            # The session's total timeout (PAYSTREAM_NOTIFY_TIMEOUT_S) bounds the whole
            # attempt: connect, send, the answer's status line.
            async with client.post(claim.url, data=claim.body, headers=headers,
                                   allow_redirects=False) as response:
                status = response.status
                # The first bytes of the answer, for the merchant's delivery log.
                head = printable_head(await response.content.read(HEAD_BYTES))
        except TimeoutError:
            error = f"no answer within {s.timeout_s:g} s"
        except AddressRefused as exc:
            error = f"not sent (SSRF guard): {exc}"[:_ERROR_TEXT_MAX]
        except aiohttp.ClientConnectorError as exc:
            # The guard's refusal at resolution is wrapped: its own text says why.
            why = exc.os_error if isinstance(exc.os_error, ResolvedInside) else exc
            error = f"{type(why).__name__}: {why}"[:_ERROR_TEXT_MAX]
        except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a URL aiohttp refuses
            error = f"{type(exc).__name__}: {exc}"[:_ERROR_TEXT_MAX]
        latency = time.perf_counter() - t0
        self._hooks.after_send()
        self._busy[claim.endpoint_id] -= 1
        self._in_flight -= 1
        self._answers.append(self._answer(claim, started_at, latency, status, error, head))
        self._answered.set()
        self._freed_since_claim += 1
        if self._freed_since_claim >= self._claim_when_freed:
            self._freed.set()

    def _answer(self, claim: store.Claim, started_at: datetime, latency: float,
                status: int | None, error: str | None, head: str | None) -> store.Answer:
        s = self.settings
        verdict = judge(status)
        metrics.ATTEMPTS.labels(claim.endpoint_id, verdict.value).inc()
        metrics.ATTEMPT_SECONDS.labels(claim.endpoint_id).observe(latency)
        if status is not None and verdict is not Verdict.DELIVERED:
            error = f"HTTP {status}"
        delay = None
        if verdict is Verdict.DELIVERED:
            state = "delivered"
            metrics.DELIVERY_SECONDS.observe(
                max(0.0, (datetime.now(UTC) - claim.created_at).total_seconds()))
        elif verdict is Verdict.REFUSED:
            state = "failed"
            metrics.GAVE_UP.labels(claim.endpoint_id, "refused").inc()
        else:
            delay = retry_delay(claim.attempt, s.retry_delays_s, s.jitter, self._rng)
            state = "pending" if delay is not None else "failed"
            if delay is None:
                metrics.GAVE_UP.labels(claim.endpoint_id, "schedule_spent").inc()
        if state != "delivered":
            log.warning("delivery_attempt_failed", trace_id=claim.trace_id,
                        intent_id=claim.intent_id, endpoint_id=claim.endpoint_id,
                        attempt=claim.attempt, status_code=status, error=error,
                        next_attempt_in_s=delay, gave_up=state == "failed")
        return store.Answer(claim, started_at, latency, status, error, state, delay, head)


def printable_head(data: bytes) -> str:
    """An answer's first bytes as text a log can show: undecodable bytes replaced,
    control characters but newline and tab dropped."""
    text = data.decode("utf-8", errors="replace")
    return "".join(c for c in text if c.isprintable() or c in "\n\t")


async def _wait(event: asyncio.Event | None, timeout_s: float, stop: threading.Event) -> None:
    """Until `event` is set (None: never), `timeout_s` passed, or `stop` is set (a
    thread's event: looked at every tenth of a second at least)."""
    deadline = time.monotonic() + timeout_s
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if event is None:
            await asyncio.sleep(min(left, 0.1))
            continue
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(left, 0.1)):
                await event.wait()
                return
