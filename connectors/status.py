"""The status of the outbox connector, as Kafka Connect reports it: one reading, typed.

`GET /connectors/{name}/status` answers 200 with the connector's state and each task's,
404 when the connector is not registered, and anything else when Connect is unwell. The
stack's wait for a running connector, the task restarter and the health check all read
it here, so "running" and "failed" mean the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from paystream.connectors.endpoint import ConnectorEndpoint, rest_auth

RUNNING = "RUNNING"
FAILED = "FAILED"


@dataclass(frozen=True)
class TaskStatus:
    id: int | None
    state: str
    trace: str = ""  # the exception Connect caught, for a FAILED task


@dataclass(frozen=True)
class ConnectorStatus:
    http_status: int  # 200; 404: not registered; anything else: Connect is unwell
    state: str = "?"  # the connector's own state (RUNNING, PAUSED, FAILED, ...)
    tasks: tuple[TaskStatus, ...] = ()

    @classmethod
    def parse(cls, http_status: int, body: object) -> ConnectorStatus:
        """From the HTTP status and the decoded JSON body; tolerant of a body that is
        not the expected document (a proxy's error page, a partial answer)."""
        if http_status != 200 or not isinstance(body, dict):
            return cls(http_status)
        connector = body.get("connector")
        tasks = body.get("tasks")
        return cls(
            http_status,
            str(connector.get("state", "?")) if isinstance(connector, dict) else "?",
            tuple(_task(t) for t in tasks if isinstance(t, dict))
            if isinstance(tasks, list) else ())

    @property
    def registered(self) -> bool:
        return self.http_status != 404

    @property
    def running(self) -> bool:
        """The connector and every task RUNNING (and at least one task: a connector
        without a task streams nothing)."""
        return (self.http_status == 200 and self.state == RUNNING and bool(self.tasks)
                and all(t.state == RUNNING for t in self.tasks))

    @property
    def failed_parts(self) -> tuple[str, ...]:
        """"connector" and/or "task N" for each part that is FAILED."""
        parts = ["connector"] if self.state == FAILED else []
        parts += [f"task {t.id}" for t in self.tasks if t.state == FAILED]
        return tuple(parts)

    @property
    def failure_causes(self) -> tuple[str, ...]:
        """The first line of each FAILED task's trace."""
        return tuple(t.trace.splitlines()[0] for t in self.tasks
                     if t.state == FAILED and t.trace)

    @property
    def summary(self) -> str:
        """RUNNING when the connector and every task run; else what is wrong, briefly."""
        if self.http_status == 404:
            return "absent (not registered)"
        if self.http_status != 200:
            return f"HTTP {self.http_status}"
        if not self.tasks:
            return f"{self.state} (no task)"
        if self.running:
            return RUNNING
        return "/".join([self.state, *(t.state for t in self.tasks)])


def _task(doc: dict[str, Any]) -> TaskStatus:
    task_id = doc.get("id")
    return TaskStatus(task_id if isinstance(task_id, int) else None,
                      str(doc.get("state", "?")), str(doc.get("trace") or ""))


def read_status(endpoint: ConnectorEndpoint, *, client: httpx.Client | None = None,
                timeout: float = 5.0) -> ConnectorStatus:
    """GET the connector's status. Raises httpx.HTTPError when Connect does not answer:
    each caller says what that means for it (wait, log, or report unhealthy). A `client`
    brings its own credentials (endpoint.rest_client()); without one, rest_auth() is
    sent."""
    url = f"{endpoint.connect_url}/connectors/{endpoint.connector_name}/status"
    resp = (client.get(url) if client is not None
            else httpx.get(url, timeout=timeout, auth=rest_auth()))
    try:
        body = resp.json() if resp.content else None
    except ValueError:  # not JSON: an HTML error page from a proxy, say
        body = None
    return ConnectorStatus.parse(resp.status_code, body)


def connector_summary(http_status: int, body: object) -> str:
    """ConnectorStatus.summary of one answer (for a reader holding the raw document)."""
    return ConnectorStatus.parse(http_status, body).summary


def failed_parts(body: object) -> tuple[str, ...]:
    """ConnectorStatus.failed_parts of a 200 answer's document."""
    return ConnectorStatus.parse(200, body).failed_parts
