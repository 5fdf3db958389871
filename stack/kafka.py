"""The Kafka broker (KRaft, one combined broker + controller), the project's topics, and
starting a consumer group at a topic's end."""

from __future__ import annotations

import hashlib
import re
import string
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from paystream.stack.process import StackError, read_pid, run, start_detached, stop_pid, wait_until
from paystream.stack.settings import StackSettings

COMPONENT = "kafka"
CONFIG_DIR = Path(__file__).resolve().parents[1] / "connectors" / "config"
POM = Path(__file__).resolve().parents[1] / "connectors" / "pom.xml"

# The project's topics and their final partition count (None: the stack's setting).
# The DLQ and notification topics are keyed like the main topic.
TOPICS = ("paystream.payments", "paystream.payments.dlq", "paystream.notifications")


def render(template: Path, target: Path, **values: object) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    text = string.Template(template.read_text()).substitute(
        {k: str(v) for k, v in values.items()})
    target.write_text(text)
    return target


def resolve_jars(s: StackSettings) -> bool:
    """Resolve the pom's runtime classpath into jars/ once; return True if it ran now."""
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()
    marker = s.jars_dir / ".pom-sha256"
    if marker.exists() and marker.read_text().strip() == digest:
        return False
    s.jars_dir.mkdir(parents=True, exist_ok=True)
    for old in s.jars_dir.glob("*.jar"):
        old.unlink()
    run(["mvn", "-B", "-q", "-f", str(POM), "dependency:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={s.jars_dir}"], "maven", timeout=1200)
    marker.write_text(digest + "\n")
    return True


def kafka_version(s: StackSettings) -> str:
    for jar in s.jars_dir.glob("kafka-clients-*.jar"):
        return jar.stem.removeprefix("kafka-clients-")
    return "?"


def java_cmd(s: StackSettings, heap: str, log_name: str, main: str, *args: str) -> list[str]:
    return [
        "java", f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={CONFIG_DIR / 'log4j2.xml'}",
        f"-Dkafka.logs.dir={s.logs_dir}", f"-Dpaystream.log.name={log_name}",
        "-cp", f"{s.jars_dir}/*", main, *args,
    ]


def server_properties(s: StackSettings) -> Path:
    return render(CONFIG_DIR / "server.properties", s.run_dir / "server.properties",
                  kafka_port=s.kafka_port, controller_port=s.controller_port,
                  data_dir=s.kafka_data, partitions=s.partitions)


def format_storage(s: StackSettings) -> bool:
    """Format KRaft storage once (idempotent); return True if it was formatted now."""
    if (s.kafka_data / "meta.properties").exists():
        return False
    props = server_properties(s)
    id_file = s.state_dir / "kafka-cluster-id"
    if not id_file.exists():
        out = run(["java", "-cp", f"{s.jars_dir}/*", "kafka.tools.StorageTool",
                   "random-uuid"], COMPONENT, timeout=120)
        id_file.write_text(out.strip().splitlines()[-1] + "\n")
    run(["java", "-cp", f"{s.jars_dir}/*", "kafka.tools.StorageTool", "format",
         "--standalone", "-t", id_file.read_text().strip(), "-c", str(props),
         "--ignore-formatted"], COMPONENT, timeout=120)
    return True


def pid_file(s: StackSettings) -> Path:
    return s.run_dir / "kafka.pid"


def log_file(s: StackSettings) -> Path:
    return s.logs_dir / "kafka.log"


def admin(s: StackSettings) -> AdminClient:
    # log_level 2: "connection refused" while the broker starts is expected, not news.
    return AdminClient({"bootstrap.servers": s.kafka_bootstrap, "socket.timeout.ms": 3000,
                        "log_level": 2})


def healthy(s: StackSettings) -> bool:
    try:
        md = admin(s).list_topics(timeout=3)
    except KafkaException:
        return False
    return len(md.brokers) > 0


def start(s: StackSettings) -> bool:
    if read_pid(pid_file(s)) is not None:
        return False
    props = server_properties(s)
    start_detached(java_cmd(s, s.kafka_heap, "kafka", "kafka.Kafka", str(props)),
                   pid_file=pid_file(s), out_file=s.logs_dir / "kafka.out")
    wait_until(COMPONENT, "accepting requests", lambda: healthy(s), timeout=120,
               log=log_file(s), pid_file=pid_file(s))
    return True


def stop(s: StackSettings) -> bool:
    # Controlled shutdown of a single node takes a few seconds.
    return stop_pid(pid_file(s), timeout=60)


def ensure_topics(s: StackSettings) -> list[str]:
    """Create the project's topics with their final partition count; return those created."""
    client = admin(s)
    existing = client.list_topics(timeout=10).topics
    created = []
    missing = [NewTopic(t, num_partitions=s.partitions, replication_factor=1)
               for t in TOPICS if t not in existing]
    if missing:
        for name, fut in client.create_topics(missing, operation_timeout=30).items():
            try:
                fut.result(30)
                created.append(name)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise StackError(COMPONENT, f"cannot create topic {name}: {exc}") from exc
    for name in TOPICS:
        if name in existing and len(existing[name].partitions) != s.partitions:
            # Never repartition silently: it would move users to other partitions.
            print(f"  warning: topic {name} has {len(existing[name].partitions)} partitions,"
                  f" PAYSTREAM_TOPIC_PARTITIONS says {s.partitions}; left as it is")
    return created


def start_group_at_end(group: str, topic: str, bootstrap: str | None = None
                       ) -> dict[int, int]:
    """Commit the topic's current end offsets for `group`, so a new group reads only what
    comes next: a chaos run, a benchmark or a test applies its own events, not what
    earlier runs left on the shared topic. Returns partition -> the offset committed.
    Raises KafkaException when the broker does not answer, LookupError when the topic
    is missing."""
    servers = bootstrap or StackSettings.from_env().kafka_bootstrap
    c = Consumer({"bootstrap.servers": servers, "group.id": group,
                  "enable.auto.commit": False, "log_level": 2})
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            raise LookupError(f"topic {topic} is missing at {servers}: "
                              f"{meta.error if meta else 'no metadata'}")
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in sorted(meta.partitions)}
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in ends.items()],
                 asynchronous=False)
    finally:
        c.close()
    return ends


def jvm_rss_mib(pid: int | None) -> str:
    if pid is None:
        return "-"
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return "-"
    m = re.search(r"VmRSS:\s+(\d+) kB", text)
    return f"{int(m.group(1)) // 1024} MiB" if m else "-"
