"""Kafka Connect (distributed mode) and the Debezium outbox connector."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from paystream.stack.kafka import CONFIG_DIR, java_cmd, render
from paystream.stack.process import StackError, read_pid, start_detached, stop_pid, wait_until
from paystream.stack.settings import StackSettings

COMPONENT = "connect"
CONNECTOR_FILE = CONFIG_DIR / "outbox-connector.json"


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
                   env=s.service_env())
    # The REST API answers /connectors only once the worker has joined its group.
    wait_until(COMPONENT, "serving its REST API", lambda: healthy(s), timeout=180,
               log=log_file(s), pid_file=pid_file(s))
    return True


def stop(s: StackSettings) -> bool:
    return stop_pid(pid_file(s), timeout=60)


def connector_config() -> dict[str, str]:
    return json.loads(CONNECTOR_FILE.read_text())


def register(s: StackSettings) -> None:
    """PUT the connector config: creates it, or updates it in place (idempotent)."""
    resp = httpx.put(f"{s.connect_url}/connectors/{s.connector_name}/config",
                     json=connector_config(), timeout=60)
    if resp.status_code not in (200, 201):
        raise StackError(COMPONENT, f"registering {s.connector_name} failed: "
                         f"{resp.status_code} {resp.text[:2000]}", log_file(s))


def status(s: StackSettings) -> dict | None:
    try:
        resp = _get(s, f"/connectors/{s.connector_name}/status")
    except httpx.HTTPError:
        return None
    return resp.json() if resp.status_code == 200 else None


def connector_state(s: StackSettings) -> str:
    st = status(s)
    if st is None:
        return "absent"
    tasks = st.get("tasks", [])
    states = [st["connector"]["state"]] + [t["state"] for t in tasks]
    if not tasks:
        return f"{st['connector']['state']} (no task yet)"
    return "RUNNING" if all(x == "RUNNING" for x in states) else "/".join(states)


def wait_running(s: StackSettings, timeout: float = 120) -> None:
    def check() -> bool:
        st = status(s)
        if st is None:
            return False
        for task in st.get("tasks", []):
            if task["state"] == "FAILED":
                raise StackError(COMPONENT, "connector task FAILED:\n"
                                 + task.get("trace", "")[:3000], log_file(s))
        return connector_state(s) == "RUNNING"

    wait_until(COMPONENT, "running the connector and its task", check, timeout=timeout,
               log=log_file(s), pid_file=pid_file(s))

