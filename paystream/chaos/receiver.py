"""A real webhook receiver: an aiohttp server on a port of its own, on a thread of the
calling process (the chaos run's, or a notifier test's).

Every request is checked with the `standardwebhooks` package (the reference
implementation, not paystream's code: the `chaos` extra, which a product install
leaves out) against the secret of its path; one that does not verify is answered 401 and
counted in `bad`. What a path answers, by its first segment:
  /ok/<name>                 200
  /shaky/<name>              500 to a random `shaky_share` of the requests, else 200
  /flaky/<n>/<name>          500 to the first n requests of each webhook-id, then 200
  /refuse/<name>             400
  /fail/<name>               500, always
  /hang/<name>               answers only when the receiver stops
`received[path]` lists (webhook-id, parsed body) in arrival order, verified ones only;
`answered[path][webhook-id]` the statuses they were answered, in order.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.managers import BaseManager
from typing import Any

from aiohttp import web

from paystream.notify.address_guard import AddressGuard

# The receiver listens on this machine, over http: the SSRF guard (notify/address_guard.py)
# refuses both unless the operator admits them, as these do for the notifiers (env) and
# the endpoints (guard) that send to it.
LOOPBACK_ENV = {"PAYSTREAM_NOTIFY_ALLOW_HTTP": "1",
                "PAYSTREAM_NOTIFY_ALLOWED_CIDRS": "127.0.0.0/8"}
LOOPBACK_GUARD = AddressGuard.of(["127.0.0.0/8"], allow_http=True)


class Receiver:
    def __init__(self, port: int, *, shaky_share: float = 0.0, seed: int = 0) -> None:
        self.port = port
        self.secrets: dict[str, str] = {}  # path -> whsec_ secret
        self.received: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
        self.answered: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        self.bad: list[tuple[str, str]] = []  # (path, why)
        self.shaky_share = shaky_share
        self._rng = random.Random(seed)
        self._tries: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True, name="receiver")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def add_secret(self, path: str, secret: str) -> None:
        """`secrets[path] = secret`, for a caller holding a proxy (in_own_process)."""
        self.secrets[path] = secret

    def refused(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self.bad)

    def ids(self, path: str) -> list[str]:
        with self._lock:
            return [webhook_id for webhook_id, _ in self.received[path]]

    def bodies(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return [body for _, body in self.received[path]]

    def statuses(self, path: str) -> dict[str, list[int]]:
        """webhook-id -> the statuses its verified requests were answered, in order."""
        with self._lock:
            return {k: list(v) for k, v in self.answered[path].items()}

    def start(self) -> None:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError(f"receiver on :{self.port} did not start")

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
        runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
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
            with self._lock:
                self.bad.append((path, "no secret for this path"))
            return web.Response(status=401)
        # Imported here, not at the top: without the `chaos` extra every chaos module still
        # imports, and `paystream chaos` says what to install instead of a traceback.
        from standardwebhooks import Webhook, WebhookVerificationError

        try:
            Webhook(secret).verify(body, dict(request.headers))
        except WebhookVerificationError as exc:
            with self._lock:
                self.bad.append((path, str(exc)))
            return web.Response(status=401)
        webhook_id = request.headers["webhook-id"]
        status = self._status(path, webhook_id)
        with self._lock:
            self.received[path].append((webhook_id, json.loads(body)))
            self.answered[path][webhook_id].append(status)
        if status == 0:
            assert self._stop is not None
            await self._stop.wait()  # until the receiver stops
            return web.Response(status=503)
        return web.Response(status=status, text="ok" if status == 200 else "not now")

    def _status(self, path: str, webhook_id: str) -> int:
        """What this request is answered (0: nothing until the receiver stops)."""
        with self._lock:
            self._tries[(path, webhook_id)] += 1
            tries = self._tries[(path, webhook_id)]
            roll = self._rng.random()
        kind = path.split("/")[1]
        if kind == "hang":
            return 0
        if kind == "refuse":
            return 400
        if kind == "fail":
            return 500
        if kind == "flaky" and tries <= int(path.split("/")[2]):
            return 500
        if kind == "shaky" and roll < self.shaky_share:
            return 500
        return 200


class _Host(BaseManager):
    """A process of its own that runs a Receiver; callers hold a proxy to it."""


_Host.register("Receiver", Receiver)


@contextmanager
def in_own_process(port: int, **options: Any) -> Iterator[Receiver]:
    """A started Receiver in a process of its own (answers never wait for the caller's
    interpreter), reached through a proxy: its methods, not its attributes."""
    host = _Host()
    host.start()
    try:
        server: Receiver = host.Receiver(port, **options)  # type: ignore[attr-defined]
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        host.shutdown()


@contextmanager
def receiver(port: int, **options: Any) -> Iterator[Receiver]:
    server = Receiver(port, **options)
    server.start()
    try:
        yield server
    finally:
        server.stop()
