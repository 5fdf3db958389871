"""Restarts the Debezium connector's failed tasks, so CDC heals itself.

Kafka Connect never restarts a FAILED task on its own. A task fails for good when it
(re)starts while Postgres is unreachable: a broker restart rebalances the worker, the
task starts again, Postgres happens to be restarting too, and Debezium's start-up throws
"Couldn't get timestamp utils ... Connection refused" (not a retriable error). From then
on nothing reaches Kafka until someone restarts the task: the chaos suite found exactly
that. This loop asks Connect for the status every `interval` seconds and restarts what
FAILED (`POST /connectors/{name}/restart?includeTasks=true&onlyFailed=true`); a task
that fails again (Postgres still down) is restarted at the next check. Restarting is
safe: the task resumes from its committed offset, and the ledger's idempotency absorbs
whatever it streams twice.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import httpx
import structlog

from paystream.connectors.endpoint import ConnectorEndpoint, rest_client
from paystream.connectors.status import read_status

log = structlog.get_logger("paystream.connectors.task_restarter")
DEFAULT_INTERVAL_S = 5.0
# Restart the connector and its tasks, but only the FAILED ones (KIP-745).
RESTART_PARAMS = {"includeTasks": "true", "onlyFailed": "true"}


@dataclass(frozen=True)
class Check:
    state: str                # the connector's state, or "unreachable" / "absent" / "HTTP n"
    failed: tuple[str, ...]   # "connector" and/or "task N" that were FAILED
    restarted: bool


def check_once(endpoint: ConnectorEndpoint, client: httpx.Client) -> Check:
    """One status check, and a restart of the failed parts if there are any. `client`
    carries the REST credentials (endpoint.rest_client())."""
    name = endpoint.connector_name
    try:
        status = read_status(endpoint, client=client)
    except httpx.HTTPError as exc:
        log.warning("connect_unreachable", connect_url=endpoint.connect_url, error=str(exc))
        return Check("unreachable", (), False)
    if not status.registered:
        log.error("connector_absent", connector=name,
                  hint="paystream stack setup registers it")
        return Check("absent", (), False)
    if status.http_status != 200:
        log.warning("connect_status_error", connector=name, status=status.http_status)
        return Check(f"HTTP {status.http_status}", (), False)
    failed = status.failed_parts
    if not failed:
        return Check(status.state, (), False)
    log.warning("connector_failed_restarting", connector=name,
                failed=list(failed), cause=list(status.failure_causes[:1]))
    try:
        answer = client.post(f"{endpoint.connect_url}/connectors/{name}/restart",
                             params=RESTART_PARAMS)
    except httpx.HTTPError as exc:
        log.error("connector_restart_failed", connector=name, error=str(exc))
        return Check(status.state, failed, False)
    restarted = answer.status_code in (200, 202, 204)
    if not restarted:
        log.error("connector_restart_refused", connector=name,
                  status=answer.status_code, body=answer.text[:500])
    return Check(status.state, failed, restarted)


def run(endpoint: ConnectorEndpoint, stop: threading.Event,
        interval: float = DEFAULT_INTERVAL_S) -> None:
    log.info("task_restarter_started", connector=endpoint.connector_name,
             connect_url=endpoint.connect_url, interval_s=interval)
    with rest_client(timeout=10) as client:
        while not stop.is_set():
            check_once(endpoint, client)
            stop.wait(interval)
