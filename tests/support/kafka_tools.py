"""Kafka's own tools, as evidence independent of paystream's code: what a node wrote in
its log segments (org.apache.kafka.tools.DumpLogSegments: the producer id of every record batch,
-1 for a producer that was not idempotent), and who leads the KRaft quorum
(`kafka-metadata-quorum describe --status`)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from paystream import kafka_security
from paystream.credentials import write_private
from paystream.stack import kafka
from paystream.stack.settings import StackSettings

BATCH = re.compile(r"baseOffset: (\d+) lastOffset: (\d+) .*?producerId: (-?\d+)")


@dataclass(frozen=True)
class Batch:
    partition: int
    first: int
    last: int
    producer_id: int


def _java(s: StackSettings, *args: str, timeout: float = 120) -> str:
    done = subprocess.run(["java", "-Xmx256m", "-cp", f"{s.jars_dir}/*", *args],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def _dump(s: StackSettings, node_id: int, topic: str, *options: str) -> str:
    """DumpLogSegments over every segment of `topic` in node `node_id`'s data folder."""
    node = next(n for n in s.kafka_nodes if n.node_id == node_id)
    folders = sorted(kafka.data_dir(s, node).glob(f"{topic}-*"),
                     key=lambda p: int(p.name.rsplit("-", 1)[1]))
    segments = [f for d in folders for f in sorted(d.glob("*.log"))]
    if not segments:
        return ""
    return _java(s, "org.apache.kafka.tools.DumpLogSegments", *options,
                 "--files", ",".join(map(str, segments)))


def in_log(s: StackSettings, node_id: int, topic: str, text: str) -> bool:
    """Whether `text` is in a record (key, value or headers) of `topic` on node
    `node_id`'s disk, visible to consumers or not (beyond the high watermark too)."""
    return text in _dump(s, node_id, topic, "--print-data-log")


def record_batches(s: StackSettings, node_id: int, topic: str) -> list[Batch]:
    """Every record batch of `topic` in node `node_id`'s data folder, read from the
    segment files by Kafka's DumpLogSegments."""
    out = _dump(s, node_id, topic)
    batches, partition = [], -1
    for line in out.splitlines():
        if line.startswith("Dumping "):
            partition = int(Path(line.split()[1]).parent.name.rsplit("-", 1)[1])
        elif m := BATCH.search(line):
            batches.append(Batch(partition, int(m[1]), int(m[2]), int(m[3])))
    return batches


def quorum_leader(s: StackSettings, config_dir: Path) -> int:
    """The KRaft leader's node id as `kafka-metadata-quorum describe --status` reports
    it, asking as the admin (its client properties written 0600 under `config_dir`)."""
    conf = kafka_security.client_config(kafka_security.ADMIN)
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{conf["sasl.username"]}" password="{conf["sasl.password"]}";')
    props = config_dir / "admin.properties"
    write_private(props, f"security.protocol={conf['security.protocol']}\n"
                         f"sasl.mechanism={conf['sasl.mechanism']}\n"
                         f"sasl.jaas.config={jaas}\n")
    out = _java(s, "org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                s.kafka_bootstrap, "--command-config", str(props), "describe", "--status")
    m = re.search(r"^LeaderId:\s+(\d+)", out, re.M)
    assert m, out
    return int(m[1])
