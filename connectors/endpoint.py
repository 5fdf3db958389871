"""Where Kafka Connect answers, how to authenticate to it, and which connector is
paystream's, from the environment.

Every reader of the Connect REST API (the stack manager, the task restarter, the health
check) takes these from here, or from a StackSettings, which gets them from here.

The REST API takes HTTP basic auth (Connect's BasicAuthSecurityRestExtension): user
PAYSTREAM_CONNECT_REST_USER (default `paystream`), password read from the file
PAYSTREAM_CONNECT_REST_PASSWORD_FILE (default: the secret `connect-rest` that `stack up`
generates). When that file does not exist no credentials are sent, and a locked Connect
answers 401, which every caller reports as it reports any other refusal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import httpx

from paystream import credentials
from paystream.env import env_int, env_str

REST_SECRET = "connect-rest"
DEFAULT_REST_USER = "paystream"

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


def rest_user() -> str:
    return env_str("PAYSTREAM_CONNECT_REST_USER", DEFAULT_REST_USER)


def rest_password_file() -> Path:
    explicit = env_str("PAYSTREAM_CONNECT_REST_PASSWORD_FILE", None)
    return Path(explicit) if explicit else credentials.secrets_dir() / REST_SECRET


def rest_auth() -> httpx.BasicAuth | None:
    """The credentials every Connect REST call sends; None when there is no password
    file (a Connect that is not locked down)."""
    try:
        password = rest_password_file().read_text().strip()
    except FileNotFoundError:
        return None
    return httpx.BasicAuth(rest_user(), password) if password else None


def rest_client(timeout: float = 10.0) -> httpx.Client:
    """An HTTP client for the Connect REST API, sending rest_auth()."""
    return httpx.Client(timeout=timeout, auth=rest_auth())
