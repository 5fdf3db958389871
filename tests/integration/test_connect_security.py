"""Kafka Connect locked down (docs/trust-boundaries.md#connect-rest-and-kafka): its REST
API needs the stack's credentials, its env config provider hands out only the connector's
variables, and the worker runs with a minimal environment and no secret on its command
line. Real Connect, real broker."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from paystream import credentials
from paystream.connectors.endpoint import rest_auth, rest_user
from paystream.stack import connect, kafka
from paystream.stack.process import read_pid
from paystream.stack.settings import StackSettings

PLUGIN = "io.debezium.connector.postgresql.PostgresConnector"


@pytest.fixture
def stack() -> StackSettings:
    s = StackSettings.from_env()
    try:
        connect.wait_running(s, timeout=60)
    except Exception as exc:  # any failure here means "no stack"
        pytest.fail(f"Connect is not running the connector ({exc}); run `paystream stack up`")
    return s


def _proc(pid_file: Path, what: str) -> bytes:
    pid = read_pid(pid_file)
    assert pid is not None, "the process is not running"
    return Path(f"/proc/{pid}/{what}").read_bytes()


@pytest.mark.parametrize("auth", [None, ("paystream", "wrong-password"),
                                  ("admin", "admin")])
def test_rest_without_the_credentials_is_401(stack, auth) -> None:
    for method, path in (("GET", "/"), ("GET", "/connectors"),
                         ("GET", f"/connectors/{stack.connector_name}/config"),
                         ("DELETE", f"/connectors/{stack.connector_name}")):
        answer = httpx.request(method, stack.connect_url + path, auth=auth, timeout=10)
        assert answer.status_code == 401, (method, path, answer.status_code)
    assert connect.status(stack) is not None and connect.status(stack).running


def test_rest_with_the_credentials_is_served(stack) -> None:
    auth = rest_auth()
    assert auth is not None
    answer = httpx.get(f"{stack.connect_url}/connectors", auth=auth, timeout=10)
    assert answer.status_code == 200
    assert stack.connector_name in answer.json()
    assert rest_user() == "paystream"


def _validate(stack: StackSettings, topic_prefix: str) -> list[str]:
    """Connect resolves config providers before validating: the errors of topic.prefix
    (which allows only [A-Za-z0-9._-]) show the value it resolved to."""
    answer = httpx.put(
        f"{stack.connect_url}/connector-plugins/PostgresConnector/config/validate",
        json={"connector.class": PLUGIN, "name": "env-probe", "topic.prefix": topic_prefix},
        auth=rest_auth(), timeout=60)
    assert answer.status_code == 200, answer.text
    [field] = [c["value"] for c in answer.json()["configs"]
               if c.get("value") and c["value"]["name"] == "topic.prefix"]
    return list(field["errors"])


def test_the_env_provider_hands_out_the_connector_variables_only(stack) -> None:
    # Allowed: resolved (a valid prefix, no error).
    assert _validate(stack, "${env:PAYSTREAM_PG_DB}") == []
    # HOME is in the worker's environment, but not allowed: the placeholder stays as it
    # is (had it resolved, the error would quote "/root" or the like).
    [error] = _validate(stack, "${env:HOME}")
    assert "${env:HOME}" in error
    # Not in the worker's environment at all, and not allowed either.
    [error] = _validate(stack, "${env:PAYSTREAM_DATABASE_URL}")
    assert "${env:PAYSTREAM_DATABASE_URL}" in error


def test_the_worker_runs_with_a_minimal_environment(stack) -> None:
    environ = _proc(connect.pid_file(stack), "environ").split(b"\0")
    names = {entry.split(b"=", 1)[0].decode() for entry in environ if entry}
    assert set(connect.CONNECTOR_ENV) <= names
    assert names <= set(connect.CONNECTOR_ENV) | set(connect.JAVA_RUNTIME_ENV), names


def test_no_secret_on_a_command_line(stack) -> None:
    secrets = [credentials.read_secret(n).encode() for n in
               ("connect-rest", "kafka-connect", "kafka-admin", kafka.CONTROLLER_SECRET)]
    for pid_file in (connect.pid_file(stack), kafka.pid_file(stack)):
        cmdline = _proc(pid_file, "cmdline")
        assert not any(secret in cmdline for secret in secrets)
    assert b"-Djava.security.auth.login.config=" in _proc(connect.pid_file(stack), "cmdline")
    for name in ("connect-rest.jaas", "connect-rest-users.properties",
                 "connect-distributed.properties", "server.properties", "kcat.conf"):
        path = credentials.secrets_dir() / name
        assert path.stat().st_mode & 0o777 == 0o600, name
