"""Receivers of the alert tests' own, on free loopback ports: an HTTP server recording
every POST Alertmanager makes (the generic webhooks, PagerDuty's Events v2 endpoint, a
Slack-compatible incoming webhook, each on a path of its own) and an SMTP server
(aiosmtpd) keeping every mail. What a test asserts is what reached them."""

from __future__ import annotations

import email
import email.policy
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from paystream.launch import free_port


@dataclass(frozen=True)
class Post:
    at: float  # time.monotonic()
    path: str
    body: dict[str, Any]

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts of an Alertmanager webhook body (its own JSON)."""
        found: list[dict[str, Any]] = self.body.get("alerts", [])
        return found


class HttpReceiver:
    """Every POST, with its path and JSON body, answered 200."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._posts: list[Post] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(size)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw.decode(errors="replace")}
                with receiver._lock:
                    receiver._posts.append(Post(time.monotonic(), self.path, body))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"status": "success"}')

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="alert-receiver", daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{path}"

    def posts(self, path: str, since: float = 0.0) -> list[Post]:
        with self._lock:
            return [p for p in self._posts if p.path == path and p.at >= since]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass(frozen=True)
class Mail:
    at: float
    to: tuple[str, ...]
    subject: str
    text: str


class SmtpSink:
    """An SMTP server (no TLS, no login) keeping every message it is sent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mails: list[Mail] = []
        sink = self

        class Handler:
            async def handle_DATA(self, server: Any, session: Any,  # noqa: N802
                                  envelope: Any) -> str:
                message = email.message_from_bytes(envelope.content,
                                                   policy=email.policy.default)
                parts = [p.get_content() for p in message.walk()
                         if p.get_content_type() in ("text/plain", "text/html")]
                with sink._lock:
                    sink._mails.append(Mail(time.monotonic(), tuple(envelope.rcpt_tos),
                                            str(message["subject"]), "\n".join(parts)))
                return "250 OK"

        self.port = free_port()
        self._controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self._controller.start()

    @property
    def smarthost(self) -> str:
        return f"127.0.0.1:{self.port}"

    def mails(self, since: float = 0.0) -> list[Mail]:
        with self._lock:
            return [m for m in self._mails if m.at >= since]

    def close(self) -> None:
        self._controller.stop()

