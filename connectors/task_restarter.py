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

from paystream.stack.settings import StackSettings

log = structlog.get_logger("paystream.connectors.task_restarter")
DEFAULT_INTERVAL_S = 5.0
# Restart the connector and its tasks, but only the FAILED ones (KIP-745).
RESTART_PARAMS = {"includeTasks": "true", "onlyFailed": "true"}


@dataclass(frozen=True)
class Check:
    state: str                # the connector's state, or "unreachable" / "absent"
    failed: tuple[str, ...]   # "connector" and/or "task N" that were FAILED
    restarted: bool


def failed_parts(status: dict) -> tuple[str, ...]:
    """Which parts of a Connect status document are FAILED."""
    parts = ["connector"] if status.get("connector", {}).get("state") == "FAILED" else []
    parts += [f"task {t.get('id')}" for t in status.get("tasks", [])
              if t.get("state") == "FAILED"]
    return tuple(parts)


def check_once(s: StackSettings, client: httpx.Client) -> Check:
    """One status check, and a restart of the failed parts if there are any."""
    url = f"{s.connect_url}/connectors/{s.connector_name}"
    try:
        resp = client.get(url + "/status")
    except httpx.HTTPError as exc:
        log.warning("connect_unreachable", connect_url=s.connect_url, error=str(exc))
        return Check("unreachable", (), False)
    if resp.status_code == 404:
        log.error("connector_absent", connector=s.connector_name,
                  hint="paystream stack setup registers it")
        return Check("absent", (), False)
    status = resp.json()
    failed = failed_parts(status)
    if not failed:
        return Check(status["connector"]["state"], (), False)
    traces = [t.get("trace", "").splitlines()[0] for t in status.get("tasks", [])
              if t.get("state") == "FAILED" and t.get("trace")]
    log.warning("connector_failed_restarting", connector=s.connector_name,
                failed=list(failed), cause=traces[:1])
    try:
        answer = client.post(url + "/restart", params=RESTART_PARAMS)
    except httpx.HTTPError as exc:
        log.error("connector_restart_failed", connector=s.connector_name, error=str(exc))
        return Check(status["connector"]["state"], failed, False)
    restarted = answer.status_code in (200, 202, 204)
    if not restarted:
        log.error("connector_restart_refused", connector=s.connector_name,
                  status=answer.status_code, body=answer.text[:500])
    return Check(status["connector"]["state"], failed, restarted)


def run(s: StackSettings, stop: threading.Event,
        interval: float = DEFAULT_INTERVAL_S) -> None:
    log.info("task_restarter_started", connector=s.connector_name,
             connect_url=s.connect_url, interval_s=interval)
    with httpx.Client(timeout=10) as client:
        while not stop.is_set():
            check_once(s, client)
            stop.wait(interval)
