"""A running cluster's state as its nodes see it: which node is the active controller
(the KRaft quorum's leader), and whether every partition has all its replicas in sync.

Kafka's clients cannot tell the active controller: a broker answers Metadata and
DescribeCluster with a random live broker as "controller" in KRaft mode, and librdkafka
has no DescribeQuorum. Each voter writes its view of the quorum (leader id and epoch) to
`__cluster_metadata-0/quorum-state` in its data folder on every election, before it acts
on it; the view of the highest epoch among the running nodes is the current one. The
cluster tests check it against Kafka's own `kafka-metadata-quorum describe --status`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from confluent_kafka import KafkaException

from paystream.kafka_nodes import KafkaNode
from paystream.stack import kafka
from paystream.stack.process import read_pid
from paystream.stack.settings import StackSettings

STATE_FILE = "__cluster_metadata-0/quorum-state"


@dataclass(frozen=True)
class Leader:
    node_id: int
    epoch: int


def view(s: StackSettings, node: KafkaNode) -> Leader | None:
    """What `node` last wrote about the quorum's leader; None when it knows none."""
    try:
        state = json.loads((kafka.data_dir(s, node) / STATE_FILE).read_text())
    except (FileNotFoundError, ValueError):  # not formatted yet, or caught mid-write
        return None
    leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
    return Leader(leader, epoch) if leader >= 0 else None


def active_controller(s: StackSettings) -> Leader | None:
    """The leader in the newest view among the running nodes; None when no running node
    knows one (no quorum)."""
    views = [v for n in s.kafka_nodes
             if read_pid(kafka.pid_file(s, n)) is not None and (v := view(s, n)) is not None]
    if not views:
        return None
    newest = max(views, key=lambda v: v.epoch)
    return newest if read_pid(kafka.pid_file(s, _node(s, newest.node_id))) else None


def _node(s: StackSettings, node_id: int) -> KafkaNode:
    return next(n for n in s.kafka_nodes if n.node_id == node_id)


def under_replicated(s: StackSettings, topics: tuple[str, ...] | None = None,
                     timeout: float = 5) -> list[str] | None:
    """`topic-partition` of every partition (of `topics`, default all) with fewer
    replicas in sync than assigned; None when the cluster does not answer."""
    try:
        md = kafka.admin(s).list_topics(timeout=timeout)
    except KafkaException:
        return None
    out = []
    for name, topic in md.topics.items():
        if topics is not None and name not in topics:
            continue
        for pid, part in topic.partitions.items():
            if len(part.isrs) < len(part.replicas):
                out.append(f"{name}-{pid}")
    return sorted(out)
