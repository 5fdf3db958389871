"""The operator console as the tests meet it: `paystream console` started as a process on
a free port, a console key made with `paystream console keys create`, and a logged-in
HTTP session (requests, the login form's own token included)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field

import requests

from paystream.launch import free_port, paystream_argv

SESSION_COOKIE = "paystream_console"


def make_key(name: str) -> tuple[str, str]:
    """(key id, key) of a new console key, made by the command an operator runs."""
    done = subprocess.run(paystream_argv("console", "keys", "create", "--name", name),
                          capture_output=True, text=True, timeout=60, check=True)
    key_id = re.search(r"^key id\s+(\S+)$", done.stdout, re.M)
    key = re.search(r"^key\s+(pck_\S+)$", done.stdout, re.M)
    assert key_id and key, done.stdout
    return key_id.group(1), key.group(1)


def csrf_of(page: str) -> str:
    """The CSRF token a page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


@dataclass
class ConsoleServer:
    port: int
    proc: subprocess.Popen[bytes]
    key_id: str
    key: str
    sessions: list[requests.Session] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def login(self, key: str | None = None) -> requests.Session:
        """A session logged in through the login form (with its token and cookie)."""
        http = requests.Session()
        self.sessions.append(http)
        form = http.get(self.url + "/login", timeout=10)
        token = re.search(r'name="login_csrf" value="([^"]+)"', form.text)
        assert token, form.text
        answer = http.post(self.url + "/login", data={"key": self.key if key is None else key,
                                                      "login_csrf": token.group(1)},
                           allow_redirects=False, timeout=10)
        assert answer.status_code == 303, (answer.status_code, answer.text[:500])
        return http

    def stop(self) -> None:
        for http in self.sessions:
            http.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_console(name: str = "tests", env: dict[str, str] | None = None) -> ConsoleServer:
    """The console on a free loopback port, answering; fails after 30 s otherwise.
    `env`: settings of this console's own (PAYSTREAM_CONSOLE_...)."""
    key_id, key = make_key(name)
    port = free_port()
    proc = subprocess.Popen(paystream_argv("console", "--port", str(port)),
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(f"http://127.0.0.1:{port}/login", timeout=2).status_code == 200:
                return ConsoleServer(port, proc, key_id, key)
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"paystream console did not answer on {port} "
                                 f"(exit {proc.poll()})")
        time.sleep(0.2)
