"""Sends the traffic plan at a steady rate and retries like a provider does.

A request answered 429, 5xx, or not answered at all (the ingest was killed, the
connection refused) is sent again with the same webhook-id and body and a fresh
timestamp and signature, until it gets a 2xx or 4xx answer or its retry budget ends. A
4xx is final, as a provider takes it: a deposit for a user nobody created answered 422
unknown_user is refused for good, never retried (the invariants expect exactly that).

A user's requests are sent one at a time, each after the previous one's final answer:
the order the answers came back in is then the order the ledger applies that user's
events in (the outbox row commits before the answer, and one user's records share a
partition), so the checker can recompute every balance from this record alone.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter

import aiohttp

from paystream.chaos import alchemy
from paystream.chaos.traffic import Request, TrafficPlan
from paystream.ingest import standard_webhooks

RETRY_BUDGET_S = 240.0  # Alchemy retries for ~10 minutes; we bound the run
BACKOFF_S = (0.25, 0.5, 1.0, 2.0)
REQUEST_TIMEOUT_S = 10.0
# Transport failures a provider would retry: refused, reset, timed out, cut mid-answer.
RETRIABLE = (aiohttp.ClientError, asyncio.TimeoutError)


class Sender:
    def __init__(self, url: str, secret: bytes, plan: TrafficPlan, alchemy_key: str) -> None:
        self.base_url = url
        self.secret = secret
        self.alchemy_key = alchemy_key
        self.plan = plan
        self._users: dict[str, asyncio.Lock] = {}
        self._answers = 0
        self.sent: list[Request] = []
        self.retries: Counter[str] = Counter()
        self.latencies_ms: list[float] = []
        self.in_flight = 0
        self.answered = 0
        # Set while run() goes: burst() hands requests to its loop from another thread.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _headers(self, req: Request) -> dict[str, str]:
        if req.endpoint == "alchemy":
            return {"content-type": "application/json",
                    alchemy.SIGNATURE_HEADER: alchemy.sign(req.body, self.alchemy_key)}
        ts = int(time.time())
        secret = b"x" * 32 if req.bad_signature else self.secret
        return {"content-type": "application/json", "webhook-id": req.webhook_id,
                "webhook-timestamp": str(ts),
                "webhook-signature": standard_webhooks.sign(req.webhook_id, ts, req.body,
                                                            secret)}

    async def _send(self, client: aiohttp.ClientSession, req: Request) -> None:
        self.in_flight += 1
        try:
            async with self._users.setdefault(req.user_id, asyncio.Lock()):
                await self._send_until_answered(client, req)
        finally:
            self.in_flight -= 1

    async def _send_until_answered(self, client: aiohttp.ClientSession, req: Request) -> None:
        deadline = time.monotonic() + RETRY_BUDGET_S
        while True:
            req.attempts += 1
            started = time.monotonic()
            try:
                async with client.post(f"{self.base_url}/webhooks/{req.endpoint}",
                                       data=req.body,
                                       headers=self._headers(req)) as resp:
                    status = resp.status
                    text = await resp.text()
            except RETRIABLE as exc:
                reason = type(exc).__name__
            else:
                if status < 500 and status != 429:
                    self.latencies_ms.append((time.monotonic() - started) * 1000)
                    req.status = status
                    self._answers += 1
                    req.answered_seq = self._answers
                    try:
                        payload = json.loads(text)
                    except ValueError:
                        payload = {}
                    # A refusal's code (unknown_user, conflict...), else the status
                    # of an acceptance (accepted / duplicate).
                    req.answer = str(payload.get("code") or payload.get("status")
                                     or payload.get("reason") or payload.get("error") or "")
                    self.answered += 1
                    self.plan.note_answer(req)
                    return
                reason = str(status)
            self.retries[reason] += 1
            if time.monotonic() > deadline:
                return  # unanswered: neither accepted nor refused
            await asyncio.sleep(BACKOFF_S[min(req.attempts - 1, len(BACKOFF_S) - 1)])

    def _start(self, req: Request) -> None:
        """Record `req` as sent and send it (on the loop run() goes on)."""
        assert self._client is not None
        self.sent.append(req)
        task = asyncio.create_task(self._send(self._client, req))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start_all(self, reqs: list[Request]) -> None:
        for req in reqs:
            self._start(req)

    def burst(self, reqs: list[Request]) -> None:
        """Send `reqs` all at once beside the steady traffic; called from another thread
        while run() goes. Returns once every one of them is on its way."""
        if self._loop is None:
            raise RuntimeError("the sender is not running")
        asyncio.run_coroutine_threadsafe(self._start_all(reqs), self._loop).result(30)

    async def run(self, rate: float, duration_s: float,
                  faults_pending: threading.Event | None = None) -> None:
        """Send at `rate` for `duration_s`, and for as long after as `faults_pending` is
        set: faults slowed by a loaded machine must still land on a pipeline under load."""
        interval = 1.0 / rate
        connector = aiohttp.TCPConnector(limit=128)
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
            self._loop, self._client = asyncio.get_running_loop(), client
            start = time.monotonic()
            n = 0
            while (time.monotonic() - start < duration_s
                   or (faults_pending is not None and faults_pending.is_set())):
                target = start + n * interval
                delay = target - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                self._start(self.plan.next())
                n += 1
            while self._tasks:  # a burst may add some while the others finish
                await asyncio.gather(*list(self._tasks))
            self._loop = None
