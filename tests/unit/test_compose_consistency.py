"""docker-compose.yml cannot run here (no Docker engine); these checks keep it in step
with the tested no-Docker configuration instead: the same images, connector, broker and
worker configuration, database roles, Kafka principals and ACLs, and least privilege
(one published port, no superuser outside the setup job, each process its own role)."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from paystream import credentials, kafka_security
from paystream.connectors import endpoint
from paystream.connectors.registration import connector_config
from paystream.schema import db
from paystream.stack import compose, connect, kafka, postgres, stack, standby
from paystream.stack.kafka import CONFIG_DIR, TOPICS

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
PAYSTREAM_SERVICES = {name for name, svc in SERVICES.items() if "build" in svc}
MOUNT = str(compose.SECRETS_MOUNT)


def _props(text: str) -> dict[str, str]:
    """A Java properties file as the JVM reads it: a later key wins."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def _interpolate(text: str) -> str:
    """What docker compose makes of a value: `${NAME:?...}` is the .env's NAME (here a
    stand-in, `<NAME>`), `$$` a `$`."""
    text = re.sub(r"\$\{([A-Z_]+)(?::?[?-][^}]*)?\}", lambda m: f"<{m.group(1)}>", text)
    return text.replace("$$", "$")


def _env(service: str, *, raw: bool = False) -> dict[str, str]:
    env = {k: str(v) for k, v in (SERVICES[service].get("environment") or {}).items()}
    return env if raw else {k: _interpolate(v) for k, v in env.items()}


def _script(service: str) -> str:
    return _interpolate(SERVICES[service]["command"][-1])


def _volumes(service: str) -> list[str]:
    return list(SERVICES[service].get("volumes") or [])


@pytest.fixture
def rendered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    """What the secrets job writes, with passwords generated in a scratch secrets dir."""
    monkeypatch.setenv("PAYSTREAM_SECRETS_DIR", str(tmp_path / "setup"))
    monkeypatch.setenv("PAYSTREAM_TOPIC_PARTITIONS",
                       _env("secrets")["PAYSTREAM_TOPIC_PARTITIONS"])
    compose.write_all(tmp_path / "out", chown=False, brokers=1)
    return {d.name: {f.name: f.read_text() for f in d.iterdir()}
            for d in (tmp_path / "out").iterdir()}


def test_images_are_the_versions_the_jar_manifest_resolves():
    pom = (ROOT / "connectors" / "pom.xml").read_text()
    kafka_version = re.search(r"<kafka.version>(.+?)</kafka.version>", pom).group(1)
    debezium_version = re.search(r"<debezium.version>(.+?)</debezium.version>", pom).group(1)
    assert SERVICES["kafka"]["image"] == f"apache/kafka:{kafka_version}"
    assert SERVICES["connect"]["image"] == f"quay.io/debezium/connect:{debezium_version}"
    assert SERVICES["postgres"]["image"] == "postgres:15"
    assert "wal_level=logical" in SERVICES["postgres"]["command"]


def test_postgres_runs_with_the_stacks_write_path_settings():
    command = SERVICES["postgres"]["command"]
    given = [command[i + 1] for i, arg in enumerate(command) if arg == "-c"]
    assert set(postgres.server_options()[1::2]) <= set(given)
    assert SERVICES["postgres"]["environment"]["GLIBC_TUNABLES"] == postgres.MALLOC_TUNABLES


def test_only_the_ingest_and_the_api_publish_a_port_and_the_console_its_loopback_one():
    published = {name: svc["ports"] for name, svc in SERVICES.items() if "ports" in svc}
    # The operator console on the host's loopback only: never the public interfaces.
    assert published == {"ingest": ["8000:8000"], "api": ["8100:8100"],
                         "console": ["127.0.0.1:8102:8102"]}
    assert "network_mode" not in SERVICES["api"]
    assert not any("expose" in svc for svc in SERVICES.values())
    assert "network_mode" not in SERVICES["ingest"]  # host networking would publish all


def test_the_superuser_is_postgres_from_env_and_only_setup_uses_it():
    pg_env = _env("postgres", raw=True)
    assert "POSTGRES_USER" not in pg_env  # the image's superuser keeps its name
    assert pg_env["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert "POSTGRES_DB" not in pg_env  # the setup job creates it, owned by the owner
    superuser_url = _env("setup")["PAYSTREAM_SUPERUSER_DATABASE_URL"]
    assert urlsplit(superuser_url).username == "postgres"
    for name in SERVICES:
        env = " ".join(f"{k}={v}" for k, v in _env(name).items())
        if name not in ("setup", "postgres"):
            assert "PAYSTREAM_SUPERUSER_DATABASE_URL" not in env, name
            assert "POSTGRES_PASSWORD" not in env, name
            assert "<POSTGRES_PASSWORD>" not in env and "//postgres" not in env, name
        # No process gets the one-DSN-for-every-role variable.
        assert "PAYSTREAM_DATABASE_URL" not in _env(name), name


def test_pg_hba_lets_each_role_reach_only_paystream_and_only_cdc_replicate():
    command = SERVICES["postgres"]["command"]
    hba_target = next(c.split("=", 1)[1] for c in command if c.startswith("hba_file="))
    host_file = next(v.split(":")[0] for v in _volumes("postgres") if f":{hba_target}" in v)
    rules = [line.split() for line in (ROOT / host_file).read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    replication = [r for r in rules if r[1] == "replication"]
    assert replication == [["host", "replication", db.ROLE_NAMES["cdc"], "all",
                            "scram-sha-256"]]
    for rule in rules:
        assert rule[-1] in ("scram-sha-256", "peer"), rule  # never trust, never md5
        if rule[1] == "all":
            assert rule[2] == "postgres", rule


# Containers sharing a database role: the chain scanner runs as the finality watcher's
# (the process family that reads the chain; schema/migrations/0023), the scheduled chain
# reconciliation, the invoice expiry and the console as the operator's, as the hold
# expiry does.
SHARED_ROLES = {"scanner": "finality", "chain-reconcile": "ops", "invoice-expiry": "ops",
                "console": "ops"}


def test_every_paystream_process_logs_in_as_its_own_role_and_principal():
    services = {s.name: s for s in compose.SERVICES}
    assert {*services, "secrets", "setup"} == PAYSTREAM_SERVICES
    seen_roles = set()
    for name, service in services.items():
        env = _env(name)
        # Exactly the credentials compose.service_env says, nothing of another role.
        for key, value in compose.service_env(service).items():
            assert env.get(key) == value, (name, key)
        dsns = {k: v for k, v in env.items() if k.endswith("DATABASE_URL")}
        if service.db_role is None:
            assert dsns == {}, name
        else:
            assert list(dsns) == [db.ROLE_URL_VARIABLES[service.db_role]], name
            user = urlsplit(next(iter(dsns.values()))).username
            assert user == db.ROLE_NAMES[service.db_role], name
            assert (service.db_role not in seen_roles
                    or SHARED_ROLES.get(name) == service.db_role), name
            seen_roles.add(service.db_role)
        if service.kafka_role is None:
            assert "PAYSTREAM_KAFKA_USER" not in env, name
        else:
            assert env["PAYSTREAM_KAFKA_USER"] == kafka_security.username(service.kafka_role)
            assert env["PAYSTREAM_KAFKA_USER"] != kafka_security.username(kafka_security.ADMIN)
    # The consumers' principals are the ones their groups run as.
    assert _env("ledger")["PAYSTREAM_KAFKA_USER"] == kafka_security.username(
        kafka_security.role_for_group("ledger"))
    assert _env("dlq-mirror")["PAYSTREAM_KAFKA_USER"] == kafka_security.username(
        kafka_security.role_for_group("dlq-mirror"))
    # The commands pick the roles the compose module says.
    assert SERVICES["ledger"]["command"][:2] == ["consume", "ledger"]
    assert SERVICES["dlq-mirror"]["command"][:2] == ["consume", "dlq-mirror"]
    assert SERVICES["finality"]["command"][:2] == ["consume", "finality"]
    assert SERVICES["ingest"]["command"][0] == "ingest"
    # Only the ingest gets the webhook secrets.
    for name in SERVICES:
        has = "ALCHEMY_SIGNING_KEY" in _env(name) or "PAYMENTS_WEBHOOK_SECRET" in _env(name)
        assert has == (name == "ingest"), name


def test_no_password_in_any_environment_but_the_superusers():
    for name in SERVICES:
        for key, value in _env(name).items():
            if key in ("POSTGRES_PASSWORD", "PAYSTREAM_SUPERUSER_DATABASE_URL"):
                continue
            assert "PASSWORD" not in key or key.endswith("_FILE"), (name, key)
            if "://" in value:
                assert urlsplit(value).password is None, (name, key)
            if key.endswith("DATABASE_URL"):
                assert parse_qs(urlsplit(value).query)["passfile"] == [f"{MOUNT}/pgpass"]


def test_each_container_mounts_only_its_own_secrets_volume_read_only():
    volumes = COMPOSE["volumes"]
    writer = _volumes("secrets")
    for name in SERVICES:
        if name == "secrets":
            continue
        own = [v for v in _volumes(name) if v.split(":")[0].startswith("secrets-")]
        if name == "postgres":
            assert own == []
            continue
        assert own == [f"secrets-{name}:{MOUNT}:ro"], name
        assert f"secrets-{name}" in volumes
        expected_in_job = (f"secrets-{name}:{MOUNT}" if name == "setup"
                           else f"secrets-{name}:{compose.OUT_ROOT}/{name}")
        assert expected_in_job in writer, name
    assert SERVICES["secrets"]["network_mode"] == "none"
    # Every container but setup waits for its files; the paystream ones also for setup.
    for name in ("kafka", "connect", "setup"):
        assert SERVICES[name]["depends_on"]["secrets"] == {
            "condition": "service_completed_successfully"}


def test_the_secrets_job_writes_each_container_only_its_own_credentials(rendered):
    assert set(rendered) == {s.name for s in compose.SERVICES} | {"kafka", "connect",
                                                                  compose.ALERTMANAGER}
    for service in compose.SERVICES:
        files = rendered[service.name]
        assert set(files) == set(service.files()), service.name
        if service.db_role:
            lines = files["pgpass"].splitlines()
            assert len(lines) == 1
            assert lines[0].split(":")[3] == db.ROLE_NAMES[service.db_role]
    assert set(rendered["kafka"]) == set(compose.BROKER_FILES)
    assert set(rendered["connect"]) == set(compose.WORKER_FILES)
    # Each password reaches exactly the containers that need it.
    owners = {kafka_security.secret_name(kafka_security.ADMIN): {"kafka"},
              kafka.CONTROLLER_SECRET: {"kafka"},
              kafka_security.secret_name(kafka_security.CONNECT): {"connect"},
              db.secret_name("cdc"): {"connect"},
              db.secret_name("owner"): set(), db.secret_name("ops"): set(),
              kafka_security.secret_name(kafka_security.HEALTH): set(),
              endpoint.REST_SECRET: {"connect", "connector-watchdog"}}
    for service in compose.SERVICES:
        if service.db_role:
            owners.setdefault(db.secret_name(service.db_role), set()).add(service.name)
        if service.kafka_role:
            owners[kafka_security.secret_name(service.kafka_role)] = {service.name}
    for secret, expected in owners.items():
        password = credentials.read_secret(secret)
        holders = {name for name, files in rendered.items()
                   if password in "".join(files.values())}
        assert holders == expected, secret


def test_the_uids_owning_the_files_are_the_ones_the_containers_run_as():
    assert str(SERVICES["kafka"]["user"]) == str(compose.UIDS["kafka"])
    assert str(SERVICES["connect"]["user"]) == str(compose.UIDS["connect"])
    assert str(SERVICES["secrets"]["user"]) == "0"  # to chown; it reaches no network
    assert str(SERVICES["alertmanager"]["user"]) == str(compose.UIDS["alertmanager"])
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER nobody$", dockerfile, re.M)
    for name in (*(s.name for s in compose.SERVICES), "setup"):
        assert "user" not in SERVICES[name], name  # the image's nobody
        assert compose.UIDS[name] == compose.PAYSTREAM_UID == 65534


def test_broker_security_settings_equal_the_local_brokers(rendered):
    broker = _props(rendered["kafka"]["server.properties"])
    local = _props(kafka.server_properties_text(
        node_id=1, kafka_port=9092, controller_port=9093, voters=[(1, "127.0.0.1:9093")],
        data_dir="/data", partitions=12, admin_password="a", controller_password="c"))
    template = {k: string.Template(v).safe_substitute(
        admin_user="paystream-admin", controller_user=kafka.CONTROLLER_USER, replicas="1",
        min_insync="1") for k, v in _props((CONFIG_DIR / "server.properties").read_text()).items()}
    for key in ("listener.security.protocol.map", "sasl.mechanism.inter.broker.protocol",
                "sasl.mechanism.controller.protocol",
                "listener.name.client.sasl.enabled.mechanisms",
                "listener.name.controller.sasl.enabled.mechanisms",
                "authorizer.class.name", "allow.everyone.if.no.acl.found", "super.users",
                "inter.broker.listener.name", "controller.listener.names",
                "auto.create.topics.enable", "min.insync.replicas",
                "offsets.topic.replication.factor", "group.initial.rebalance.delay.ms"):
        assert broker[key] == local[key] == template[key], key
    assert broker["listener.security.protocol.map"] == \
        "CLIENT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"
    assert broker["super.users"] == "User:paystream-admin;User:paystream-controller"
    # Only the addresses differ from the stack's.
    differing = {k for k in set(broker) | set(local) if broker.get(k) != local.get(k)}
    assert differing <= {"listeners", "advertised.listeners", "log.dirs",
                         "listener.name.client.scram-sha-512.sasl.jaas.config",
                         "listener.name.controller.plain.sasl.jaas.config"}, differing
    assert broker["log.dirs"] == compose.KAFKA_DATA
    assert broker["advertised.listeners"].startswith(f"CLIENT://{compose.KAFKA_BOOTSTRAP},")
    assert "CONTROLLER://127.0.0.1:" in broker["listeners"]  # not on the network
    assert "username=\"paystream-admin\"" in broker[
        "listener.name.client.scram-sha-512.sasl.jaas.config"]


def test_the_broker_starts_from_the_rendered_files_not_the_images_kafka_variables(
        rendered):
    script = _script("kafka")
    assert f"java @{MOUNT}/storage-format.args" in script
    assert f"kafka-server-start.sh {MOUNT}/server.properties" in script
    assert script.index("storage-format.args") < script.index("kafka-server-start.sh")
    # The image's run script, which builds its configuration from KAFKA_*, is not used.
    assert set(_env("kafka")) == {"KAFKA_HEAP_OPTS", "KAFKA_OPTS"}
    assert _env("kafka")["KAFKA_OPTS"].split() == [kafka.TRANSPARENT_HUGE_PAGES]
    args = rendered["kafka"]["storage-format.args"].splitlines()
    assert "--add-scram" in args and "--ignore-formatted" in args
    assert args[args.index("-c") + 1] == f'"{MOUNT}/server.properties"'
    assert args[args.index("-cp") + 1] == f'"{compose.KAFKA_CLASSPATH}"'
    assert any(a.startswith('"SCRAM-SHA-512=[name=paystream-admin,') for a in args)


def test_connect_worker_settings_equal_the_local_workers(rendered):
    worker = _props(rendered["connect"]["connect-distributed.properties"])
    local = _props(connect.worker_properties_text(
        bootstrap="x:1", connect_port=8083,
        client={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "paystream-connect", "sasl.password": "p"}))
    assert worker["config.providers.env.param.allowlist.pattern"] == connect.env_allowlist()
    assert worker["config.providers.env.class"].endswith("EnvVarConfigProvider")
    assert worker["rest.extension.classes"].endswith("BasicAuthSecurityRestExtension")
    for prefix in ("", "producer.", "consumer.", "admin."):
        assert worker[f"{prefix}security.protocol"] == "SASL_PLAINTEXT"
        assert worker[f"{prefix}sasl.mechanism"] == "SCRAM-SHA-512"
        assert 'username="paystream-connect"' in worker[f"{prefix}sasl.jaas.config"]
    differing = {k for k in set(worker) | set(local) if worker.get(k) != local.get(k)}
    assert differing <= {"bootstrap.servers", "listeners", "rest.advertised.host.name",
                         "plugin.path", "sasl.jaas.config", "producer.sasl.jaas.config",
                         "consumer.sasl.jaas.config", "admin.sasl.jaas.config"}, differing
    assert worker["bootstrap.servers"] == compose.KAFKA_BOOTSTRAP
    jaas = rendered["connect"][connect.REST_JAAS]
    assert f'file="{MOUNT}/{connect.REST_USERS}"' in jaas
    script = _script("connect")
    assert f"connect-distributed.sh {MOUNT}/connect-distributed.properties" in script
    assert f"-Djava.security.auth.login.config={MOUNT}/{connect.REST_JAAS}" in \
        _env("connect")["KAFKA_OPTS"]
    assert kafka.TRANSPARENT_HUGE_PAGES in _env("connect")["KAFKA_OPTS"].split()


def test_connect_container_provides_every_variable_the_connector_json_reads():
    wanted = set()
    for value in connector_config().values():
        wanted |= set(re.findall(r"\$\{env:([A-Z_]+)\}", value))
    assert wanted == set(connect.CONNECTOR_ENV)
    env = _env("connect")
    script = _script("connect")
    # Four from the environment, the password from the volume (by the command).
    assert {k: v for k, v in env.items() if k.startswith("PAYSTREAM_")} == \
        compose.connect_env()
    assert env["PAYSTREAM_PG_USER"] == db.ROLE_NAMES["cdc"]
    assert f'export PAYSTREAM_PG_PASSWORD="$(cat {MOUNT}/db-cdc)"' in script
    assert set(compose.connect_env()) | {"PAYSTREAM_PG_PASSWORD"} == wanted
    # The image's CONNECT_* configuration path is not used (no worker setting leaks
    # into the environment).
    assert not any(k.startswith("CONNECT_") for k in env)


def test_setup_job_runs_the_stacks_role_user_and_acl_code(monkeypatch: pytest.MonkeyPatch):
    setup = SERVICES["setup"]
    assert setup["command"] == ["stack", "setup"]
    assert set(TOPICS) >= {"paystream.payments", "paystream.payments.dlq"}
    env = _env("setup")
    for key, value in compose.setup_env().items():
        assert env.get(key) == value, key
    assert env[db.ROLE_URL_VARIABLES["owner"]] == compose.pg_dsn("owner")
    assert urlsplit(env["PAYSTREAM_SUPERUSER_DATABASE_URL"]).hostname == "postgres"
    # `stack setup` with a superuser DSN calls exactly the stack's functions, in order.
    calls: list[str] = []
    monkeypatch.setenv("PAYSTREAM_SUPERUSER_DATABASE_URL", "postgresql://postgres@h/postgres")
    monkeypatch.setenv("PAYSTREAM_KAFKA_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
    monkeypatch.setattr(stack, "wait_until", lambda *a, **k: calls.append(f"wait {a[0]}"))
    monkeypatch.setattr(postgres, "read_role_passwords", lambda: {})
    monkeypatch.setattr(postgres, "ensure_roles_over_dsn",
                        lambda dsn, pw, database: calls.append(f"roles {database}"))
    monkeypatch.setattr(kafka, "ensure_users", lambda s: calls.append("users"))
    monkeypatch.setattr(kafka, "ensure_acls", lambda s: calls.append("acls"))
    monkeypatch.setattr(stack, "_configure", lambda s: calls.append("configure"))
    from paystream.stack.settings import StackSettings
    monkeypatch.setenv("PAYSTREAM_PG_DB", env["PAYSTREAM_PG_DB"])
    assert stack.setup(StackSettings.from_env()) == 0
    assert calls == ["wait postgres", "roles paystream", "wait postgres", "wait kafka",
                     "users", "acls", "wait connect", "configure"]
    assert urlsplit(compose.pg_dsn("owner")).path == "/" + env["PAYSTREAM_PG_DB"]


def test_compose_waits_in_the_order_the_credentials_need():
    for name in (s.name for s in compose.SERVICES):
        assert SERVICES[name]["depends_on"]["setup"] == {
            "condition": "service_completed_successfully"}, name
    assert SERVICES["setup"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    # Connect authenticates with a user the setup job creates: it must come back.
    assert SERVICES["connect"]["restart"] in ("on-failure", "unless-stopped", "always")


# --- the replicated variant: docker-compose.cluster.yml merged onto the base file ---

CLUSTER_FILE = yaml.safe_load((ROOT / "docker-compose.cluster.yml").read_text())
NODES = compose.kafka_services(compose.CLUSTER_BROKERS)


def _volume_target(volume: str) -> str:
    return volume.split(":")[1]


def _merge_service(base: dict, override: dict) -> dict:
    """One service as `docker compose -f base -f override` makes it: environment and
    depends_on merged by key, volumes by their target path, anything else replaced."""
    out = dict(base)
    for key, value in override.items():
        if key == "extends":
            continue
        if key in ("environment", "depends_on") and key in out:
            out[key] = {**out[key], **value}
        elif key == "volumes" and key in out:
            by_target = {_volume_target(v): v for v in out[key]}
            by_target.update({_volume_target(v): v for v in value})
            out[key] = list(by_target.values())
        else:
            out[key] = value
    return out


def _merged(override: dict) -> dict:
    """The base file with `override` on top, as `docker compose -f base -f override`."""
    services = dict(SERVICES)
    for name, service in override["services"].items():
        if "extends" in service:
            source = yaml.safe_load((ROOT / service["extends"]["file"]).read_text())
            # Compose never shares depends_on through extends.
            start = {k: v for k, v in source["services"][service["extends"]["service"]].items()
                     if k != "depends_on"}
        else:
            start = services.get(name, {})  # a service of the override's own
        services[name] = _merge_service(start, service)
    return {"services": services, "volumes": {**COMPOSE["volumes"], **override["volumes"]}}


MERGED = _merged(CLUSTER_FILE)
CLUSTER_SERVICES = MERGED["services"]


@pytest.fixture
def rendered_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                     ) -> dict[str, dict[str, str]]:
    """What the cluster variant's secrets job writes (PAYSTREAM_KAFKA_BROKERS from the
    override file)."""
    env = {k: str(v) for k, v in CLUSTER_SERVICES["secrets"]["environment"].items()}
    monkeypatch.setenv("PAYSTREAM_SECRETS_DIR", str(tmp_path / "setup"))
    monkeypatch.setenv("PAYSTREAM_TOPIC_PARTITIONS", env["PAYSTREAM_TOPIC_PARTITIONS"])
    monkeypatch.setenv("PAYSTREAM_KAFKA_BROKERS", env["PAYSTREAM_KAFKA_BROKERS"])
    compose.write_all(tmp_path / "out", chown=False)
    return {d.name: {f.name: f.read_text() for f in d.iterdir()}
            for d in (tmp_path / "out").iterdir()}


def test_cluster_variant_runs_every_node_as_the_base_file_runs_kafka():
    assert NODES == ["kafka", "kafka-2", "kafka-3"]
    base = CLUSTER_SERVICES["kafka"]
    assert base == SERVICES["kafka"]  # node 1 is the base file's broker, unchanged
    for name in NODES[1:]:
        node = CLUSTER_SERVICES[name]
        for key in ("image", "user", "command", "environment"):
            assert node[key] == base[key], (name, key)
        suffix = name.removeprefix("kafka")
        assert sorted(node["volumes"]) == sorted([
            f"kafkadata{suffix}:{compose.KAFKA_DATA}", f"secrets-{name}:{MOUNT}:ro"]), name
        assert node["depends_on"]["secrets"] == {"condition": "service_completed_successfully"}
        assert f"kafkadata{suffix}" in MERGED["volumes"]
        assert f"secrets-{name}" in MERGED["volumes"]
        assert f"secrets-{name}:{compose.OUT_ROOT}/{name}" in CLUSTER_SERVICES["secrets"]["volumes"]
        assert compose.UIDS[name] == compose.KAFKA_UID
        assert "ports" not in node  # nothing but the ingest, the API, the console
    published = {n for n, svc in CLUSTER_SERVICES.items() if "ports" in svc}
    assert published == {"ingest", "api", "console"}


def test_cluster_variant_secrets_job_writes_each_node_its_own_files(rendered_cluster):
    assert set(rendered_cluster) == {s.name for s in compose.SERVICES} | {
        *NODES, "connect", compose.ALERTMANAGER}
    ids = set()
    for node_id, name in enumerate(NODES, 1):
        files = rendered_cluster[name]
        assert set(files) == set(compose.BROKER_FILES), name
        props = _props(files["server.properties"])
        assert props["node.id"] == str(node_id)
        assert props["controller.quorum.voters"] == (
            "1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093")
        assert "controller.quorum.bootstrap.servers" not in props
        assert props["advertised.listeners"] == f"CLIENT://{name}:9092,CONTROLLER://{name}:9093"
        args = files["storage-format.args"].splitlines()
        assert "--standalone" not in args and "--add-scram" in args
        ids.add(args[args.index("-t") + 1])
    assert len(ids) == 1  # one cluster id for the three nodes


def test_cluster_variant_nodes_equal_the_local_clusters_but_for_addresses(rendered_cluster):
    voters = [(n, f"127.0.0.1:{9093 + 10 * (n - 1)}") for n in (1, 2, 3)]
    for node_id, name in enumerate(NODES, 1):
        broker = _props(rendered_cluster[name]["server.properties"])
        local = _props(kafka.server_properties_text(
            node_id=node_id, kafka_port=9092, controller_port=9093, voters=voters,
            data_dir="/data", partitions=12, admin_password="a", controller_password="c"))
        for key, value in (("default.replication.factor", "3"),
                           ("min.insync.replicas", "2"),
                           ("offsets.topic.replication.factor", "3"),
                           ("transaction.state.log.min.isr", "2"),
                           ("unclean.leader.election.enable", "false")):
            assert broker[key] == local[key] == value, (name, key)
        differing = {k for k in set(broker) | set(local) if broker.get(k) != local.get(k)}
        assert differing <= {"listeners", "advertised.listeners", "log.dirs",
                             "controller.quorum.voters",
                             "listener.name.client.scram-sha-512.sasl.jaas.config",
                             "listener.name.controller.plain.sasl.jaas.config"}, differing


def test_cluster_variant_clients_bootstrap_from_every_node(rendered_cluster):
    every = compose.kafka_bootstrap(compose.CLUSTER_BROKERS)
    assert every == "kafka:9092,kafka-2:9092,kafka-3:9092"
    for service in compose.SERVICES:
        env = {k: _interpolate(str(v)) for k, v in
               (CLUSTER_SERVICES[service.name].get("environment") or {}).items()}
        for key, value in compose.service_env(service, compose.CLUSTER_BROKERS).items():
            assert env.get(key) == value, (service.name, key)
    setup = {k: _interpolate(str(v)) for k, v in CLUSTER_SERVICES["setup"]["environment"].items()}
    for key, value in compose.setup_env(compose.CLUSTER_BROKERS).items():
        assert setup.get(key) == value, key
    worker = _props(rendered_cluster["connect"]["connect-distributed.properties"])
    assert worker["bootstrap.servers"] == every
    for name in ("setup", "connect"):
        for node in NODES[1:]:
            assert CLUSTER_SERVICES[name]["depends_on"][node] == {"condition": "service_started"}


def test_alertmanager_runs_the_stacks_configuration_from_its_own_volume(
        rendered, tmp_path: Path) -> None:
    """The same routes, receivers and inhibitions as the stack's, amtool-checked; the
    receivers' secrets named where the container mounts them, never inline."""
    from paystream.stack import alertmanager

    service = SERVICES["alertmanager"]
    assert service["image"] == "prom/alertmanager:v0.25.0"  # Debian 12's version
    assert f"--config.file={MOUNT}/{compose.ALERTMANAGER_CONFIG}" in service["command"]
    assert "--cluster.listen-address=" in service["command"]
    files = rendered[compose.ALERTMANAGER]
    assert set(files) == {compose.ALERTMANAGER_CONFIG}  # no receiver secret put there
    cfg = json.loads(files[compose.ALERTMANAGER_CONFIG])
    assert cfg["route"] == alertmanager.config(alertmanager.AlertmanagerConfig(),
                                               tmp_path)["route"]
    assert cfg["inhibit_rules"] == alertmanager.inhibit_rules()
    path = tmp_path / "alertmanager.yml"
    path.write_text(files[compose.ALERTMANAGER_CONFIG])
    alertmanager.check(path)
    for key in ("PAYSTREAM_ALERT_WEBHOOK_URL", "PAYSTREAM_ALERT_SMTP_SMARTHOST"):
        assert key in _env("secrets")


# --- the standby variant: docker-compose.standby.yml merged onto the base file ---

STANDBY_FILE = yaml.safe_load((ROOT / "docker-compose.standby.yml").read_text())
STANDBY_SERVICES = _merged(STANDBY_FILE)["services"]
NODE_SERVICES = ("postgres", "postgres-2")


def test_standby_variant_every_client_reaches_both_nodes_as_schema_db_does():
    """Every DSN of the base file names both nodes and asks for the writable one, with
    the query schema/db.py adds without Docker; role, database and passfile unchanged."""
    local = db.PostgresAddress(host="h", port=1, db="d", standby_port=2).dsn("ingest")
    extra = local.split("?", 1)[1].split("&", 1)[1]
    urls = {(name, key): value for name, svc in SERVICES.items()
            for key, value in (svc.get("environment") or {}).items()
            if key.endswith("DATABASE_URL")}
    assert len(urls) > 10
    for (name, key), base_url in urls.items():
        url = _interpolate(str(STANDBY_SERVICES[name]["environment"][key]))
        parts, base = urlsplit(url), urlsplit(_interpolate(base_url))
        assert parts.netloc == base.netloc.replace("@postgres:5432",
                                                   "@postgres:5432,postgres-2:5432"), url
        assert (parts.path, parts.query) == (
            base.path, f"{base.query}&{extra}" if base.query else extra), url


def test_standby_variant_nodes_run_the_base_files_settings_and_the_local_standbys():
    command = SERVICES["postgres"]["command"]
    given = dict(command[i + 1].split("=", 1) for i, arg in enumerate(command) if arg == "-c")
    del given["hba_file"]  # the node's pg_hba.conf is copied into its data folder
    sql = (ROOT / "compose" / "standby-node.sql").read_text()
    altered = dict(re.findall(r"ALTER SYSTEM SET (\w+) = '([^']*)';", sql))
    node_conf = dict(re.findall(r"^(\w+) = '([^']*)'$", standby.node_conf_text(), re.M))
    local = {k: node_conf[k] for k in ("wal_level", "wal_keep_size",
                                       "shared_preload_libraries")}
    assert altered == {**given, **local}
    for name in NODE_SERVICES:
        node = STANDBY_SERVICES[name]
        assert node["command"] == STANDBY_SERVICES["postgres"]["command"]
        assert node["environment"]["GLIBC_TUNABLES"] == postgres.MALLOC_TUNABLES
        assert "ports" not in node and "expose" not in node
    assert "ports" not in STANDBY_SERVICES["pg-monitor"]


def test_standby_variant_hba_is_the_base_one_after_pg_auto_failovers_users():
    def rules(path: Path) -> list[list[str]]:
        return [line.split() for line in path.read_text().splitlines()
                if line.strip() and not line.startswith("#")]

    base = rules(ROOT / "compose" / "pg_hba.conf")
    node = rules(ROOT / "compose" / "pg_hba.standby.conf")
    # The local stack's lines for the same users, on the compose network not loopback.
    pgaf = [line.split("#")[0].replace("127.0.0.1/32", "all").split()
            for line in standby.HBA_LINES.splitlines()]
    assert node == pgaf + base
    for name in NODE_SERVICES:
        mounts = {v.split(":")[1]: v.split(":")[0] for v in STANDBY_SERVICES[name]["volumes"]}
        assert mounts["/etc/paystream/pg_hba.conf"] == "./compose/pg_hba.standby.conf"


def test_standby_variant_data_folders_are_below_their_volumes_and_each_its_own():
    """A keeper rebuilding its node renames a fresh copy into place: not a mount point."""
    script = _interpolate(STANDBY_SERVICES["postgres"]["command"][-1])
    pgdata = re.search(r"export PGDATA=(\S+)", script).group(1)
    volumes = {}
    for name in (*NODE_SERVICES, "pg-monitor"):
        data = [v for v in STANDBY_SERVICES[name]["volumes"]
                if v.split(":")[1] == "/var/lib/postgresql/data"]
        assert len(data) == 1, name
        volumes[name] = data[0].split(":")[0]
    assert Path(pgdata).parent == Path("/var/lib/postgresql/data")
    assert len(set(volumes.values())) == 3, volumes
    assert "--replication-quorum true" in script and "--run" in script
