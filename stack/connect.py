"""The local stack's Kafka Connect worker (distributed mode): start, stop, health, and
the outbox connector registered and running on it (connectors/ holds the connector).

Locked down: the REST API (loopback only) takes HTTP basic auth, checked by Connect's
BasicAuthSecurityRestExtension against a users file; the worker's Kafka clients are
the connect principal; the worker runs with a minimal environment (CONNECTOR_ENV and
what the JVM needs), and its env config provider hands out CONNECTOR_ENV only. Every
file holding a password is written 0600 under the secrets dir."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx

from paystream import credentials, kafka_security
from paystream.connectors import endpoint, registration
from paystream.connectors.status import FAILED, ConnectorStatus, read_status
from paystream.stack import ports
from paystream.stack.kafka import CONFIG_DIR, java_cmd, render_text
from paystream.stack.process import StackError, read_pid, start_detached, stop_pid, wait_until
from paystream.stack.settings import StackSettings

COMPONENT = "connect"

# The variables the connector's JSON reads (`${env:...}`): the only ones Connect is
# given besides JAVA_RUNTIME_ENV, and the only ones its env config provider hands out.
CONNECTOR_ENV = ("PAYSTREAM_PG_HOST", "PAYSTREAM_PG_PORT", "PAYSTREAM_PG_USER",
                 "PAYSTREAM_PG_PASSWORD", "PAYSTREAM_PG_DB")
# What the JVM needs from the parent's environment (java on PATH, the locale, a home).
JAVA_RUNTIME_ENV = ("PATH", "LANG", "LC_ALL", "HOME", "JAVA_HOME", "TZ")
REST_JAAS = "connect-rest.jaas"
REST_USERS = "connect-rest-users.properties"


def env_allowlist() -> str:
    """The EnvVarConfigProvider's allowlist.pattern: exactly the CONNECTOR_ENV names."""
    return "^(" + "|".join(re.escape(n) for n in CONNECTOR_ENV) + ")$"


def worker_env(s: StackSettings) -> dict[str, str]:
    """Connect's whole environment: the connector's variables, and the few the JVM
    needs from ours; nothing else of the parent's (no other secret, no DSN)."""
    connector = s.connect_env()
    env = {k: v for k, v in os.environ.items() if k in JAVA_RUNTIME_ENV}
    env.update({k: connector[k] for k in CONNECTOR_ENV})
    return env


def rest_auth_texts(user: str, password: str, users_file: Path) -> tuple[str, str]:
    """The users file's text (one `user=password` line) and the JAAS file's, which points
    the extension's PropertyFileLoginModule at `users_file` (where the worker sees it)."""
    jaas = ("KafkaConnect {\n"
            "  org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule "
            f'required\n  file="{users_file}";\n}};\n')
    return f"{user}={password}\n", jaas


def write_rest_auth_files() -> Path:
    """The users file and the JAAS file (rest_auth_texts); returns the JAAS file."""
    secrets = credentials.secrets_dir()
    password = credentials.ensure_secret(endpoint.REST_SECRET)
    users = secrets / REST_USERS
    users_text, jaas_text = rest_auth_texts(endpoint.rest_user(), password, users)
    credentials.write_private(users, users_text)
    jaas = secrets / REST_JAAS
    credentials.write_private(jaas, jaas_text)
    return jaas


def worker_properties_text(*, bootstrap: str, connect_port: int,
                           client: dict[str, str]) -> str:
    """The worker's configuration (connect-distributed.properties filled in), its Kafka
    clients authenticating with `client` (kafka_security.client_config(CONNECT)): the
    stack's worker, and docker-compose's (stack/compose.py appends its addresses)."""
    protocol = client["security.protocol"]
    if protocol.startswith("SASL"):
        jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{client["sasl.username"]}" password="{client["sasl.password"]}";')
        mechanism = client["sasl.mechanism"]
    else:  # a broker elsewhere without SASL: the settings below are then ignored
        jaas, mechanism = "", "GSSAPI"
    return render_text(CONFIG_DIR / "connect-distributed.properties",
                       bootstrap=bootstrap, connect_port=connect_port,
                       security_protocol=protocol, sasl_mechanism=mechanism, jaas=jaas,
                       env_allowlist=env_allowlist())


def worker_properties(s: StackSettings) -> Path:
    target = credentials.secrets_dir() / "connect-distributed.properties"
    credentials.write_private(target, worker_properties_text(
        bootstrap=s.kafka_bootstrap, connect_port=s.connect_port,
        client=kafka_security.client_config(kafka_security.CONNECT)))
    return target


def pid_file(s: StackSettings) -> Path:
    return s.run_dir / "connect.pid"


def log_file(s: StackSettings) -> Path:
    return s.logs_dir / "connect.log"


def _get(s: StackSettings, path: str) -> httpx.Response:
    return httpx.get(s.connect_url + path, timeout=5, auth=endpoint.rest_auth())


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
    ports.ensure_free(COMPONENT, s.connect_port, "PAYSTREAM_CONNECT_PORT")
    props = worker_properties(s)
    jaas = write_rest_auth_files()
    cmd = java_cmd(s, s.connect_heap, "connect",
                   "org.apache.kafka.connect.cli.ConnectDistributed", str(props),
                   jvm_opts=(f"-Djava.security.auth.login.config={jaas}",))
    # The connector JSON reads the database address from these (EnvVarConfigProvider).
    start_detached(cmd, pid_file=pid_file(s), out_file=s.logs_dir / "connect.out",
                   env=worker_env(s), inherit_env=False)
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
