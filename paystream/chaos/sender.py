"""Sends the traffic plan at a steady rate and retries like a provider does.

A request answered 429, 5xx, or not answered at all (the ingest was killed, the
connection refused) is sent again with the same webhook-id and body and a fresh
timestamp and signature, until it gets a 2xx or 4xx answer or its retry budget ends.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx

from ingest import standard_webhooks
from paystream.chaos.traffic import Request, TrafficPlan

RETRY_BUDGET_S = 240.0  # Alchemy retries for ~10 minutes; we bound the run
BACKOFF_S = (0.25, 0.5, 1.0, 2.0)


class Sender:
    def __init__(self, url: str, secret: bytes, plan: TrafficPlan) -> None:
        self.url = url + "/webhooks/payments"
        self.secret = secret
        self.plan = plan
        self.sent: list[Request] = []
        self.retries: Counter[str] = Counter()
        self.latencies_ms: list[float] = []

    def _headers(self, req: Request) -> dict[str, str]:
        ts = int(time.time())
        secret = b"x" * 32 if req.bad_signature else self.secret
        return {"content-type": "application/json", "webhook-id": req.webhook_id,
                "webhook-timestamp": str(ts),
                "webhook-signature": standard_webhooks.sign(req.webhook_id, ts, req.body,
                                                            secret)}

    async def _send(self, client: httpx.AsyncClient, req: Request) -> None:
        deadline = time.monotonic() + RETRY_BUDGET_S
        while True:
            req.attempts += 1
            started = time.monotonic()
            try:
                resp = await client.post(self.url, content=req.body,
                                         headers=self._headers(req))
            except httpx.TransportError as exc:
                reason = type(exc).__name__
            else:
                if resp.status_code < 500 and resp.status_code != 429:
                    self.latencies_ms.append((time.monotonic() - started) * 1000)
                    req.status = resp.status_code
                    try:
                        payload = resp.json()
                    except ValueError:
                        payload = {}
                    req.answer = str(payload.get("status") or payload.get("reason")
                                     or payload.get("error") or "")
                    self.plan.note_answer(req)
                    return
                reason = str(resp.status_code)
            self.retries[reason] += 1
            if time.monotonic() > deadline:
                return  # unanswered: neither accepted nor refused
            await asyncio.sleep(BACKOFF_S[min(req.attempts - 1, len(BACKOFF_S) - 1)])

    async def run(self, rate: float, duration_s: float) -> None:
        interval = 1.0 / rate
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=10.0, limits=limits) as client:
            tasks: set[asyncio.Task] = set()
            start = time.monotonic()
            n = 0
            while time.monotonic() - start < duration_s:
                target = start + n * interval
                delay = target - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                req = self.plan.next()
                self.sent.append(req)
                task = asyncio.create_task(self._send(client, req))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
            if tasks:
                await asyncio.gather(*tasks)
