"""The local stack's Kafka Connect worker (distributed mode): start, stop, health, and
the outbox connector registered and running on it (connectors/ holds the connector)."""

from __future__ import annotations

from pathlib import Path

import httpx

from paystream.connectors import registration
from paystream.connectors.status import FAILED, ConnectorStatus, read_status
from paystream.stack.kafka import CONFIG_DIR, java_cmd, render
from paystream.stack.process import StackError, read_pid, start_detached, stop_pid, wait_until
from paystream.stack.settings import StackSettings

COMPONENT = "connect"


def pid_file(s: StackSettings) -> Path:
    return s.run_dir / "connect.pid"


def log_file(s: StackSettings) -> Path:
    return s.logs_dir / "connect.log"


def _get(s: StackSettings, path: str) -> httpx.Response:
    return httpx.get(s.connect_url + path, timeout=5)


def version(s: StackSettings) -> str:
    try:
        return str(_get(s, "/").json().get("version", "?"))
    except (httpx.HTTPError, ValueError):
        return "?"


def healthy(s: StackSettings) -> bool:
    try:
        return _get(s, "/connectors").status_code == 200
    except httpx.HTTPError:
        return False


def start(s: StackSettings) -> bool:
    if read_pid(pid_file(s)) is not None:
        return False
    props = render(CONFIG_DIR / "connect-distributed.properties",
                   s.run_dir / "connect-distributed.properties",
                   kafka_port=s.kafka_port, connect_port=s.connect_port)
    cmd = java_cmd(s, s.connect_heap, "connect",
                   "org.apache.kafka.connect.cli.ConnectDistributed", str(props))
    # The connector JSON reads the database address from these (EnvVarConfigProvider).
    start_detached(cmd, pid_file=pid_file(s), out_file=s.logs_dir / "connect.out",
                   env=s.connect_env())
    # The REST API answers /connectors only once the worker has joined its group.
    wait_until(COMPONENT, "serving its REST API", lambda: healthy(s), timeout=180,
               log=log_file(s), pid_file=pid_file(s))
    return True


def stop(s: StackSettings) -> bool:
    return stop_pid(pid_file(s), timeout=60)


def register(s: StackSettings) -> None:
    """PUT the connector config: creates it, or updates it in place (idempotent)."""
    try:
        registration.register(s)
    except registration.RegistrationError as exc:
        raise StackError(COMPONENT, str(exc), log_file(s)) from None


def status(s: StackSettings) -> ConnectorStatus | None:
    """The connector's status; None when Connect does not answer."""
    try:
        return read_status(s)
    except httpx.HTTPError:
        return None


def connector_state(s: StackSettings) -> str:
    st = status(s)
    return "unreachable" if st is None else st.summary


def wait_running(s: StackSettings, timeout: float = 120) -> None:
    """Until the connector and its task run; a task that FAILED fails the wait at once,
    with its trace (Connect never restarts it by itself)."""
    def check() -> bool:
        st = status(s)
        if st is None:
            return False
        for task in st.tasks:
            if task.state == FAILED:
                raise StackError(COMPONENT, "connector task FAILED:\n" + task.trace[:3000],
                                 log_file(s))
        return st.running

    wait_until(COMPONENT, "running the connector and its task", check, timeout=timeout,
               log=log_file(s), pid_file=pid_file(s))
