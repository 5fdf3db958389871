"""A real HTTP receiver for the notifier's tests: an aiohttp server on a port of its own,
on a thread of the test process.

Every request is checked with the `standardwebhooks` package (the reference
implementation, not paystream's code) against the secret of its path; one that does not
verify is answered 401 and counted in `bad`. What a path answers:
  /ok/<name>                 200
  /flaky/<n>/<name>          500 to the first n requests of each webhook-id, then 200
  /refuse/<name>             400
  /fail/<name>               500, always
  /hang/<name>               answers only when the receiver stops
`received[path]` lists (webhook-id, parsed body) in arrival order, verified ones only.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiohttp import web
from standardwebhooks import Webhook, WebhookVerificationError


class Receiver:
    def __init__(self, port: int) -> None:
        self.port = port
        self.secrets: dict[str, str] = {}  # path -> whsec_ secret
        self.received: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
        self.bad: list[tuple[str, str]] = []  # (path, why)
        self._tries: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True, name="receiver")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def ids(self, path: str) -> list[str]:
        with self._lock:
            return [webhook_id for webhook_id, _ in self.received[path]]

    def bodies(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return [body for _, body in self.received[path]]

    def start(self) -> None:
        self._thread.start()
        if not self._started.wait(10):
            raise AssertionError(f"receiver on :{self.port} did not start")

    def stop(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port)
        await site.start()
        self._started.set()
        await self._stop.wait()
        await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        body = await request.read()
        secret = self.secrets.get(path)
        if secret is None:
            self.bad.append((path, "no secret for this path"))
            return web.Response(status=401)
        try:
            Webhook(secret).verify(body, dict(request.headers))
        except WebhookVerificationError as exc:
            with self._lock:
                self.bad.append((path, str(exc)))
            return web.Response(status=401)
        webhook_id = request.headers["webhook-id"]
        with self._lock:
            self.received[path].append((webhook_id, json.loads(body)))
            self._tries[(path, webhook_id)] += 1
            tries = self._tries[(path, webhook_id)]
        kind = path.split("/")[1]
        if kind == "hang":
            assert self._stop is not None
            await self._stop.wait()  # until the receiver stops
            return web.Response(status=503)
        if kind == "refuse":
            return web.Response(status=400, text="not for us")
        if kind == "fail":
            return web.Response(status=500)
        if kind == "flaky" and tries <= int(path.split("/")[2]):
            return web.Response(status=500)
        return web.Response(status=200, text="ok")


@contextmanager
def receiver(port: int) -> Iterator[Receiver]:
    server = Receiver(port)
    server.start()
    try:
        yield server
    finally:
        server.stop()
