"""Launching `paystream` itself as a child process, and a port for it to listen on. The
supervisor (`paystream run`), the chaos run, the benchmarks and the tests all start
paystream services this one way."""

from __future__ import annotations

import socket
import sys

from paystream.env import SettingsError


def paystream_argv(*args: str) -> list[str]:
    """The command line that runs `paystream ARGS` with this interpreter: no PATH lookup,
    so it works from a venv that is not activated and under `python -m paystream.cli`."""
    return [sys.executable, "-m", "paystream.cli", *args]


def free_port() -> int:
    """A loopback port nothing listens on now (the OS picks it), for a child's server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bind_listener(host: str, port: int, what: str = "admin") -> socket.socket:
    """A bound, inheritable TCP socket on host:port for a uvicorn server's second
    listener (the ingest's and the API's admin port); SettingsError if it is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SettingsError(f"cannot listen on the {what} address {host}:{port}: {exc}") \
            from None
    sock.set_inheritable(True)
    return sock
