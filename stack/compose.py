"""docker-compose's credentials: what the one-shot `secrets` job (`paystream stack
compose-secrets`) writes, and what each container of docker-compose.yml is given.

Every password is generated once (paystream.credentials, never a default) into the
setup job's volume, the only place that holds them all: the setup job creates the
database roles, the Kafka users and the connector with them. Each other container gets
a named volume of its own, mounted read-only at SECRETS_MOUNT by that container only,
holding only its own credentials (SERVICES below; the Kafka broker's and the Connect
worker's configuration files, rendered from the same templates as the local stack's).
A container cannot read another's volume, so no process can log in as another role or
principal; `docker inspect` shows no password, since none is in an environment
variable (the Postgres superuser's, from the user's .env, is given to the postgres
container and the setup job only).

Why volumes and not compose `secrets:`: the file-based `secrets:` need the files on the
host before `docker compose up` (a step the user would have to script), and are
bind-mounted world-readable; a job writing volumes needs nothing from the user but the
superuser's password and writes each file 0600 owned by the user its container runs
as (the `user:` of each service in docker-compose.yml, UIDS here; the test checks both
agree).

tests/unit/test_compose_consistency.py checks docker-compose.yml against this module.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from paystream import credentials, kafka_nodes, kafka_security
from paystream.connectors import endpoint
from paystream.kafka_nodes import KafkaSettings
from paystream.notify import seal
from paystream.schema import db
from paystream.stack import alertmanager, connect, kafka, postgres

# Where every container sees its own volume (PAYSTREAM_SECRETS_DIR of the paystream ones).
SECRETS_MOUNT = Path("/run/paystream/secrets")
# Where the secrets job sees the other containers' volumes: OUT_ROOT/<service>.
OUT_ROOT = Path("/run/paystream/out")

PG_HOST, PG_PORT, PG_DB = "postgres", 5432, "paystream"
KAFKA_HOST, KAFKA_PORT, CONTROLLER_PORT = "kafka", 9092, 9093
KAFKA_BOOTSTRAP = f"{KAFKA_HOST}:{KAFKA_PORT}"
# The replicated variant (docker-compose.cluster.yml): the secrets job and the setup job
# get PAYSTREAM_KAFKA_BROKERS=3, node 1 stays the `kafka` service, nodes 2 and 3 are
# `kafka-2` and `kafka-3`, each container its node's files.
CLUSTER_BROKERS = 3
CONNECT_HOST, CONNECT_PORT = "connect", endpoint.DEFAULT_CONNECT_PORT
# In the images: apache/kafka's data folder and jars, debezium/connect's plugins.
KAFKA_DATA = "/var/lib/kafka/data"
KAFKA_CLASSPATH = "/opt/kafka/libs/*"
CONNECT_PLUGIN_PATH = "/kafka/connect"

# The user each container runs as (its `user:` in docker-compose.yml): its files are
# owned by it. apache/kafka's `appuser` (the image's first Alpine user), debezium/
# connect's `kafka` (uid 1001 in debezium's images), and `nobody` (our Dockerfile's).
KAFKA_UID = 1000
CONNECT_UID = 1001
PAYSTREAM_UID = 65534

BROKER_FILES = ("server.properties", "storage-format.args")
WORKER_FILES = ("connect-distributed.properties", connect.REST_JAAS, connect.REST_USERS,
                db.secret_name("cdc"))
CLUSTER_ID_SECRET = "kafka-cluster-id"


@dataclass(frozen=True)
class Service:
    """A paystream container: the database role and the Kafka principal it logs in as,
    whether it calls Connect's REST API, and whether it makes or checks notification
    intents (the seal's key: notify/seal.py)."""

    name: str
    db_role: db.DbRole | None
    kafka_role: str | None = None
    connect_rest: bool = False
    intent_seal: bool = False

    def files(self) -> tuple[str, ...]:
        names = []
        if self.db_role:
            names.append("pgpass")
        if self.kafka_role:
            names.append(kafka_security.secret_name(self.kafka_role))
        if self.connect_rest:
            names.append(endpoint.REST_SECRET)
        if self.intent_seal:
            names.append(seal.SECRET_NAME)
        return tuple(names)


# The long-running paystream containers. Kafka principals by consumer group
# (kafka_security.role_for_group), database roles as each command picks them.
SERVICES = (
    Service("ingest", "ingest"),
    Service("ledger", "ledger", kafka_security.role_for_group("ledger"), intent_seal=True),
    Service("dlq-mirror", "mirror", kafka_security.role_for_group("dlq-mirror")),
    Service("finality", "finality"),
    # The chain scanner reads the chain as the finality role (migrations 0023, 0024).
    Service("scanner", "finality"),
    Service("notifier", "notifier", kafka_security.role_for_group("notifier"),
            intent_seal=True),
    Service("connector-watchdog", None, connect_rest=True),
    Service("hold-expiry", "ops"),
    Service("invoice-expiry", "ops", intent_seal=True),
    # `reconcile --chain --loop`: the operator's check against the chain, hourly.
    Service("chain-reconcile", "ops"),
    Service("api", "api", intent_seal=True),
    # The operator console acts as the operator (migration 0029).
    Service("console", "ops", intent_seal=True),
)
SETUP = "setup"
# Alertmanager (prom/alertmanager, the same 0.25 as Debian's): its volume holds its
# configuration, generated as the stack's is from the PAYSTREAM_ALERT_* variables the
# secrets job is given, and the receivers' secret files it names, copied from the setup
# job's volume when the user put them there (stack/alertmanager.py's names).
ALERTMANAGER = "alertmanager"
ALERTMANAGER_CONFIG = "alertmanager.yml"
ALERTMANAGER_UID = 65534  # the image's `nobody`


def kafka_services(brokers: int) -> list[str]:
    """The Kafka containers (their service and host names), node 1 first."""
    return [KAFKA_HOST, *(f"{KAFKA_HOST}-{n}" for n in range(2, brokers + 1))]


def kafka_bootstrap(brokers: int = 1) -> str:
    return ",".join(f"{host}:{KAFKA_PORT}" for host in kafka_services(brokers))


UIDS = {**{k: KAFKA_UID for k in kafka_services(CLUSTER_BROKERS)}, "connect": CONNECT_UID,
        SETUP: PAYSTREAM_UID, ALERTMANAGER: ALERTMANAGER_UID,
        **{s.name: PAYSTREAM_UID for s in SERVICES}}


def pg_dsn(role: db.DbRole) -> str:
    """`role`'s DSN in compose: its password in the container's passfile."""
    passfile = quote(str(SECRETS_MOUNT / "pgpass"), safe="/")
    return (f"postgresql://{db.ROLE_NAMES[role]}@{PG_HOST}:{PG_PORT}/{PG_DB}"
            f"?passfile={passfile}")


def service_env(service: Service, brokers: int = 1) -> dict[str, str]:
    """The credentials part of a paystream container's environment (docker-compose.yml
    gives each exactly these, docker-compose.cluster.yml the bootstrap of `brokers`
    nodes): its role's DSN, its Kafka principal and password file."""
    env = {"PAYSTREAM_SECRETS_DIR": str(SECRETS_MOUNT)}
    if service.db_role:
        env[db.ROLE_URL_VARIABLES[service.db_role]] = pg_dsn(service.db_role)
    if service.kafka_role:
        env.update({
            "PAYSTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap(brokers),
            "PAYSTREAM_KAFKA_USER": kafka_security.username(service.kafka_role),
            "PAYSTREAM_KAFKA_PASSWORD_FILE": str(
                SECRETS_MOUNT / kafka_security.secret_name(service.kafka_role)),
        })
    if service.connect_rest:
        env.update({
            "PAYSTREAM_CONNECT_URL": f"http://{CONNECT_HOST}:{CONNECT_PORT}",
            "PAYSTREAM_CONNECT_REST_PASSWORD_FILE": str(SECRETS_MOUNT / endpoint.REST_SECRET),
        })
    return env


def setup_env(brokers: int = 1) -> dict[str, str]:
    """The setup job's: the owner's DSN (migrations), the admin principal, Connect's
    REST credentials; every password in its volume. PAYSTREAM_SUPERUSER_DATABASE_URL
    comes from the user's .env (docker-compose.yml). With a cluster it also waits for
    every node (PAYSTREAM_KAFKA_BROKERS): a topic of three replicas needs three brokers."""
    cluster = {} if brokers == 1 else {"PAYSTREAM_KAFKA_BROKERS": str(brokers)}
    return {**cluster,
        "PAYSTREAM_SECRETS_DIR": str(SECRETS_MOUNT),
        "PAYSTREAM_PG_HOST": PG_HOST,
        "PAYSTREAM_PG_PORT": str(PG_PORT),
        "PAYSTREAM_PG_DB": PG_DB,
        db.ROLE_URL_VARIABLES["owner"]: pg_dsn("owner"),
        "PAYSTREAM_KAFKA_BOOTSTRAP": kafka_bootstrap(brokers),
        "PAYSTREAM_KAFKA_USER": kafka_security.username(kafka_security.ADMIN),
        "PAYSTREAM_KAFKA_PASSWORD_FILE": str(
            SECRETS_MOUNT / kafka_security.secret_name(kafka_security.ADMIN)),
        "PAYSTREAM_CONNECT_URL": f"http://{CONNECT_HOST}:{CONNECT_PORT}",
        "PAYSTREAM_CONNECT_REST_PASSWORD_FILE": str(SECRETS_MOUNT / endpoint.REST_SECRET),
    }


def connect_env() -> dict[str, str]:
    """The Connect container's connector variables but the password, which its command
    reads from its volume (db-cdc) into PAYSTREAM_PG_PASSWORD, so it is in no compose
    file and no `docker inspect`."""
    return {"PAYSTREAM_PG_HOST": PG_HOST, "PAYSTREAM_PG_PORT": str(PG_PORT),
            "PAYSTREAM_PG_USER": db.ROLE_NAMES["cdc"], "PAYSTREAM_PG_DB": PG_DB}


# Appended to the stack's rendered configurations: only where the container listens and
# how others reach it (a later key wins in a Java properties file). The controller
# listener of a lone node stays on loopback (only its own broker half talks to it); a
# cluster's controllers vote and replicate the metadata over it, so it is on the network,
# behind SASL/PLAIN with the controller principal's password as on the client side.


def broker_addresses(node_id: int, brokers: int) -> dict[str, str]:
    host = kafka_services(brokers)[node_id - 1]
    listen, advertise = ("127.0.0.1", "127.0.0.1") if brokers == 1 else ("0.0.0.0", host)
    return {
        "listeners": f"CLIENT://0.0.0.0:{KAFKA_PORT},CONTROLLER://{listen}:{CONTROLLER_PORT}",
        "advertised.listeners": (f"CLIENT://{host}:{KAFKA_PORT},"
                                 f"CONTROLLER://{advertise}:{CONTROLLER_PORT}"),
    }


BROKER_ADDRESSES = broker_addresses(1, 1)
WORKER_ADDRESSES = {
    "listeners": f"http://0.0.0.0:{CONNECT_PORT}",
    "rest.advertised.host.name": CONNECT_HOST,
    "plugin.path": CONNECT_PLUGIN_PATH,
}


def _append(text: str, overrides: dict[str, str]) -> str:
    lines = "".join(f"{k}={v}\n" for k, v in overrides.items())
    return f"{text}\n# --- docker-compose: this container's addresses ---\n{lines}"


def broker_properties(partitions: int, admin_password: str, controller_password: str,
                      node_id: int = 1, brokers: int = 1) -> str:
    hosts = kafka_services(brokers)
    voters = ([(1, f"127.0.0.1:{CONTROLLER_PORT}")] if brokers == 1 else
              [(n, f"{host}:{CONTROLLER_PORT}") for n, host in enumerate(hosts, 1)])
    return _append(kafka.server_properties_text(
        node_id=node_id, kafka_port=KAFKA_PORT, controller_port=CONTROLLER_PORT,
        voters=voters, data_dir=KAFKA_DATA, partitions=partitions,
        admin_password=admin_password, controller_password=controller_password),
        broker_addresses(node_id, brokers))


def worker_properties(connect_password: str, brokers: int = 1) -> str:
    client = {"security.protocol": kafka_security.DEFAULT_PROTOCOL,
              "sasl.mechanism": kafka_security.DEFAULT_MECHANISM,
              "sasl.username": kafka_security.username(kafka_security.CONNECT),
              "sasl.password": connect_password}
    return _append(connect.worker_properties_text(
        bootstrap=kafka_bootstrap(brokers), connect_port=CONNECT_PORT, client=client),
        WORKER_ADDRESSES)


def random_cluster_id() -> str:
    """A KRaft cluster id as Kafka's Uuid.randomUuid makes one (16 random bytes, URL-safe
    base64 without padding, never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _secret(name: str) -> str:
    return credentials.read_secret(name)


def service_files(brokers: int | None = None) -> dict[str, dict[str, str]]:
    """{container: {file name: text}} for every container but the setup job, from the
    passwords in the secrets dir (generated by write_all), for `brokers` Kafka nodes
    (default: PAYSTREAM_KAFKA_BROKERS, which docker-compose.cluster.yml sets)."""
    brokers = kafka_nodes.broker_count() if brokers is None else brokers
    passwords = postgres.read_role_passwords()
    out: dict[str, dict[str, str]] = {}
    for service in SERVICES:
        files: dict[str, str] = {}
        if service.db_role:
            files["pgpass"] = db.pgpass_text(
                {db.ROLE_NAMES[service.db_role]: passwords[service.db_role]})
        if service.kafka_role:
            files[kafka_security.secret_name(service.kafka_role)] = _secret(
                kafka_security.secret_name(service.kafka_role)) + "\n"
        if service.connect_rest:
            files[endpoint.REST_SECRET] = _secret(endpoint.REST_SECRET) + "\n"
        if service.intent_seal:
            files[seal.SECRET_NAME] = _secret(seal.SECRET_NAME) + "\n"
        out[service.name] = files
    admin_password = _secret(kafka_security.secret_name(kafka_security.ADMIN))
    partitions = KafkaSettings.from_env().partitions
    for node_id, name in enumerate(kafka_services(brokers), 1):
        out[name] = {
            "server.properties": broker_properties(
                partitions, admin_password, _secret(kafka.CONTROLLER_SECRET),
                node_id=node_id, brokers=brokers),
            "storage-format.args": kafka.storage_format_args(
                classpath=KAFKA_CLASSPATH, cluster_id=_secret(CLUSTER_ID_SECRET),
                properties=SECRETS_MOUNT / "server.properties",
                admin_password=admin_password, standalone=brokers == 1),
        }
    users_text, jaas_text = connect.rest_auth_texts(
        endpoint.rest_user(), _secret(endpoint.REST_SECRET),
        SECRETS_MOUNT / connect.REST_USERS)
    out["connect"] = {
        "connect-distributed.properties": worker_properties(
            _secret(kafka_security.secret_name(kafka_security.CONNECT)), brokers),
        connect.REST_JAAS: jaas_text,
        connect.REST_USERS: users_text,
        db.secret_name("cdc"): passwords["cdc"] + "\n",
    }
    out[ALERTMANAGER] = alertmanager_files()
    return out


def alertmanager_files() -> dict[str, str]:
    """Alertmanager's configuration, naming its receivers' secrets where its container
    sees them, and those secrets (the ones the setup volume holds)."""
    secrets = credentials.secrets_dir()
    files = {name: (secrets / name).read_text() for name in alertmanager.SECRET_FILES
             if (secrets / name).is_file()}
    text = json.dumps(alertmanager.config(alertmanager.AlertmanagerConfig.from_env(),
                                          secrets), indent=2)
    # Named where the container sees them (the secrets job sees its volume elsewhere).
    files[ALERTMANAGER_CONFIG] = text.replace(str(secrets), str(SECRETS_MOUNT)) + "\n"
    return files


def ensure_passwords() -> list[str]:
    """Generate, in the secrets dir (the setup job's volume), every password that does
    not exist yet and the cluster id; return the names generated."""
    secrets = credentials.secrets_dir()
    names = [*(db.secret_name(r) for r in db.ROLE_NAMES), endpoint.REST_SECRET,
             kafka.CONTROLLER_SECRET,
             *(kafka_security.secret_name(r) for r in kafka_security.ROLES),
             seal.SECRET_NAME]
    fresh = [n for n in [*names, CLUSTER_ID_SECRET] if not (secrets / n).exists()]
    for name in names:
        credentials.ensure_secret(name)
    if not (secrets / CLUSTER_ID_SECRET).exists():
        credentials.write_private(secrets / CLUSTER_ID_SECRET, random_cluster_id() + "\n")
    return fresh


def _own(path: Path, uid: int | None) -> None:
    if uid is not None:
        os.chown(path, uid, uid)


def write_all(out_root: Path = OUT_ROOT, *, chown: bool = True,
              brokers: int | None = None) -> list[str]:
    """The secrets job: every password (ensure_passwords), the setup job's passfile,
    and each container's files into out_root/<container>/, 0600, owned by the user the
    container runs as (`chown`: as root, in the job). Idempotent: passwords are kept,
    the files rewritten. Returns the containers written."""
    ensure_passwords()
    setup_dir = credentials.secrets_dir()
    postgres.write_pgpass(postgres.read_role_passwords())
    written = []
    for name, files in service_files(brokers).items():
        folder = out_root / name
        uid = UIDS[name] if chown else None
        for file_name, text in files.items():
            credentials.write_private(folder / file_name, text)
            _own(folder / file_name, uid)
        # Files this container no longer gets (a role it lost) must not linger.
        for stale in folder.iterdir():
            if stale.name not in files:
                stale.unlink()
        _own(folder, uid)
        written.append(name)
    for path in [setup_dir, *setup_dir.iterdir()]:
        _own(path, UIDS[SETUP] if chown else None)
    return written
