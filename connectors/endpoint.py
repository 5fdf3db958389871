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
from pydantic import Field

from paystream import credentials
from paystream.env import EnvSettings

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


class ConnectSettings(EnvSettings):
    """Where Kafka Connect is and how to log in to its REST API: read by the stack
    manager, the task restarter and the health check
    ([operations](operations.md#who-may-do-what-on-kafka-and-connect))."""

    doc_section = "Where the services are"

    url: str | None = Field(None, alias="PAYSTREAM_CONNECT_URL",
                            json_schema_extra={"shown": "`http://127.0.0.1:` + "
                                                        "`PAYSTREAM_CONNECT_PORT`"},
                            description="Kafka Connect REST")
    port: int = Field(DEFAULT_CONNECT_PORT, alias="PAYSTREAM_CONNECT_PORT", ge=1,
                      description="the local Kafka Connect worker's REST port")
    connector_name: str = Field(DEFAULT_CONNECTOR_NAME, alias="PAYSTREAM_CONNECTOR_NAME",
                                description="the Debezium connector's name (registration, "
                                            "health, the task restarter)")
    rest_user: str = Field(DEFAULT_REST_USER, alias="PAYSTREAM_CONNECT_REST_USER",
                           description="the user of Connect's REST API (HTTP basic auth)")
    rest_password_file: Path | None = Field(
        None, alias="PAYSTREAM_CONNECT_REST_PASSWORD_FILE",
        json_schema_extra={"shown": "`connect-rest` in the secrets dir"},
        description="the file holding its password; when the file does not exist no "
                    "credentials are sent (a locked Connect answers 401)")


def connect_port() -> int:
    """The local Connect worker's REST port."""
    return ConnectSettings.from_env().port


def connect_url(port: int | None = None) -> str:
    """PAYSTREAM_CONNECT_URL, else the local worker on `port` (default: connect_port())."""
    settings = ConnectSettings.from_env()
    return settings.url or f"http://127.0.0.1:{settings.port if port is None else port}"


def connector_name() -> str:
    return ConnectSettings.from_env().connector_name


def rest_user() -> str:
    return ConnectSettings.from_env().rest_user


def rest_password_file() -> Path:
    explicit = ConnectSettings.from_env().rest_password_file
    return explicit if explicit else credentials.secrets_dir() / REST_SECRET


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
