"""Where Kafka Connect answers and which connector is paystream's, from the environment.

Every reader of the Connect REST API (the stack manager, the task restarter, the health
check) takes these from here, or from a StackSettings, which gets them from here.
"""

from __future__ import annotations

from typing import Protocol

from paystream.env import env_int, env_str

DEFAULT_CONNECT_PORT = 8083
DEFAULT_CONNECTOR_NAME = "paystream-outbox"


class ConnectorEndpoint(Protocol):
    """The Connect REST API's base URL and the outbox connector's name (a StackSettings
    is one)."""

    @property
    def connect_url(self) -> str: ...

    @property
    def connector_name(self) -> str: ...


def connect_port() -> int:
    """The local Connect worker's REST port."""
    return env_int("PAYSTREAM_CONNECT_PORT", DEFAULT_CONNECT_PORT)


def connect_url(port: int | None = None) -> str:
    """PAYSTREAM_CONNECT_URL, else the local worker on `port` (default: connect_port())."""
    return env_str("PAYSTREAM_CONNECT_URL",
                   f"http://127.0.0.1:{connect_port() if port is None else port}")


def connector_name() -> str:
    return env_str("PAYSTREAM_CONNECTOR_NAME", DEFAULT_CONNECTOR_NAME)
