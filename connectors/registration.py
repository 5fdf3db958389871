"""The Debezium outbox connector's configuration (config/outbox-connector.json) and its
registration with Kafka Connect.

The configuration reads the database address from the Connect worker's environment
(`${env:...}`, EnvVarConfigProvider), so one file serves every stack.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import httpx

from paystream.connectors.endpoint import ConnectorEndpoint, rest_auth

CONNECTOR_FILE = Path(__file__).resolve().parent / "config" / "outbox-connector.json"


class RegistrationError(Exception):
    """Connect refused the connector's configuration; the message has its answer."""


def connector_config() -> dict[str, str]:
    config: dict[str, str] = json.loads(CONNECTOR_FILE.read_text())
    return config


def register(endpoint: ConnectorEndpoint, *, timeout: float = 60.0,
             overrides: Mapping[str, str] | None = None) -> None:
    """PUT the connector config: creates it, or updates it in place (idempotent).
    `overrides`: settings over the file's (the failover follower's database.port)."""
    resp = httpx.put(f"{endpoint.connect_url}/connectors/{endpoint.connector_name}/config",
                     json={**connector_config(), **(overrides or {})}, timeout=timeout,
                     auth=rest_auth())
    if resp.status_code not in (200, 201):
        raise RegistrationError(f"registering {endpoint.connector_name} failed: "
                                f"{resp.status_code} {resp.text[:2000]}")
