"""The replicated cluster's pure parts: its shape (count, ports, replication), the
storage it refuses, the quorum state it reads, the stall the chaos run reports."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from paystream import kafka_nodes
from paystream.chaos.nodes import longest_gap
from paystream.env import SettingsError
from paystream.stack import kafka, quorum
from paystream.stack.settings import StackSettings

PORTS = ("PAYSTREAM_KAFKA_PORT", "PAYSTREAM_CONTROLLER_PORT", "PAYSTREAM_KAFKA_PORT_STEP",
         "PAYSTREAM_KAFKA_BROKERS", "PAYSTREAM_KAFKA_BOOTSTRAP", "PAYSTREAM_KAFKA_HEAP")


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PAYSTREAM_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("PAYSTREAM_SECRETS_DIR", raising=False)
    for name in PORTS:
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_three_nodes_take_ports_a_step_apart_and_every_client_bootstraps_from_all(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_KAFKA_BROKERS", "3")
    nodes = kafka_nodes.nodes()
    assert [(n.node_id, n.client_port, n.controller_port) for n in nodes] == [
        (1, 9092, 9093), (2, 9102, 9103), (3, 9112, 9113)]
    assert kafka_nodes.kafka_bootstrap() == "127.0.0.1:9092,127.0.0.1:9102,127.0.0.1:9112"
    s = StackSettings.from_env()
    assert (s.brokers, s.kafka_heap) == (3, "384m")
    assert kafka.server_properties_text(
        node_id=2, kafka_port=9102, controller_port=9103,
        voters=[(n.node_id, f"127.0.0.1:{n.controller_port}") for n in nodes],
        data_dir="/d", partitions=12, admin_password="a", controller_password="c"
    ).count("controller.quorum.voters=1@127.0.0.1:9093,2@127.0.0.1:9103,3@127.0.0.1:9113\n") == 1


def test_one_node_is_the_stack_it_always_was(state: Path) -> None:
    s = StackSettings.from_env()
    [node] = s.kafka_nodes
    assert (node.node_id, s.kafka_port, s.controller_port, s.kafka_heap) == (1, 9092, 9093,
                                                                              "512m")
    assert kafka_nodes.kafka_bootstrap() == "127.0.0.1:9092"
    assert kafka.pid_file(s).name == "kafka.pid" and kafka.data_dir(s, node) == s.kafka_data
    text = kafka.server_properties_text(
        node_id=1, kafka_port=9092, controller_port=9093, voters=[(1, "127.0.0.1:9093")],
        data_dir="/d", partitions=12, admin_password="a", controller_password="c")
    assert "controller.quorum.bootstrap.servers=127.0.0.1:9093\n" in text
    assert "default.replication.factor=1\n" in text and "min.insync.replicas=1\n" in text


@pytest.mark.parametrize(("count", "replicas", "min_insync"), [(1, 1, 1), (3, 3, 2), (5, 3, 2)])
def test_replication_follows_the_node_count(count: int, replicas: int, min_insync: int) -> None:
    assert kafka_nodes.replication(count) == (replicas, min_insync)


@pytest.mark.parametrize("count", ["2", "4", "0", "9"])
def test_a_count_that_survives_no_more_losses_is_refused(
        state: Path, monkeypatch: pytest.MonkeyPatch, count: str) -> None:
    monkeypatch.setenv("PAYSTREAM_KAFKA_BROKERS", count)
    with pytest.raises(SettingsError, match="PAYSTREAM_KAFKA_BROKERS"):
        kafka_nodes.broker_count()


def test_colliding_ports_are_refused(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_KAFKA_BROKERS", "3")
    monkeypatch.setenv("PAYSTREAM_KAFKA_PORT_STEP", "1")  # node 2's client port = 9093
    with pytest.raises(SettingsError, match="collide"):
        kafka_nodes.nodes()


def test_the_recorded_count_is_used_and_a_contradicting_one_refused(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kafka_nodes.record_count(3)
    assert kafka_nodes.broker_count() == 3  # later commands of that stack find it
    monkeypatch.setenv("PAYSTREAM_KAFKA_BROKERS", "1")
    s = StackSettings.from_env()
    with pytest.raises(kafka.ClusterShapeError, match="formatted for 3 node") as err:
        kafka.check_storage(s)
    assert "--brokers 3" in str(err.value)


def test_a_one_node_storage_from_before_the_record_is_one_node(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = StackSettings.from_env()
    s.kafka_data.mkdir()
    (s.kafka_data / "meta.properties").write_text("cluster.id=x\n")
    (state / kafka.SCRAM_MARKER).write_text("x\n")
    assert kafka.formatted_count(s) == 1
    kafka.check_storage(s)
    monkeypatch.setenv("PAYSTREAM_KAFKA_BROKERS", "3")
    with pytest.raises(kafka.ClusterShapeError, match="mv kafka-data old-kafka/"):
        kafka.check_storage(StackSettings.from_env())


def _quorum_state(s: StackSettings, node_id: int, leader: int, epoch: int) -> None:
    node = next(n for n in s.kafka_nodes if n.node_id == node_id)
    path = kafka.data_dir(s, node) / quorum.STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"leaderId": leader, "leaderEpoch": epoch, "votedId": -1}))
    pid_file = kafka.pid_file(s, node)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()}\n")  # a live pid: "running"


def test_the_active_controller_is_the_newest_view_of_a_running_node(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_KAFKA_BROKERS", "3")
    s = StackSettings.from_env()
    _quorum_state(s, 1, leader=1, epoch=4)   # stale: it has not heard of the election
    _quorum_state(s, 2, leader=3, epoch=5)
    _quorum_state(s, 3, leader=3, epoch=5)
    assert quorum.active_controller(s) == quorum.Leader(3, 5)
    kafka.pid_file(s, s.kafka_nodes[2]).unlink()  # node 3 is not running
    assert quorum.active_controller(s) is None    # nobody running knows a live leader


def test_a_remote_cluster_is_healthy_when_every_node_is_registered(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_KAFKA_BROKERS", "3")
    monkeypatch.setenv("PAYSTREAM_KAFKA_BOOTSTRAP", "kafka:9092,kafka-2:9092,kafka-3:9092")
    s = StackSettings.from_env()
    monkeypatch.setattr(kafka, "answers", lambda port, timeout=3.0: False)  # not local
    monkeypatch.setattr(kafka, "registered", lambda s, timeout=3: {1, 2, 3})
    assert kafka.healthy(s)
    monkeypatch.setattr(kafka, "registered", lambda s, timeout=3: {1, 3})
    assert not kafka.healthy(s)


def test_a_local_node_listed_but_not_answering_is_not_serving(
        state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAYSTREAM_KAFKA_BROKERS", "3")
    s = StackSettings.from_env()
    monkeypatch.setattr(kafka, "registered", lambda s, timeout=3: {1, 2, 3})
    monkeypatch.setattr(kafka, "answers", lambda port, timeout=3.0: port != 9102)
    assert not kafka.healthy(s)  # node 2 killed a moment ago, not fenced yet


def test_the_stall_counts_from_the_fault_and_to_the_window_end() -> None:
    applied = [9.0, 10.2, 10.4, 19.9, 20.0]
    assert longest_gap(applied, 10.0, 25.0) == pytest.approx(9.5)   # 10.4 -> 19.9
    assert longest_gap(applied, 10.3, 25.0) == pytest.approx(9.5)
    assert longest_gap(applied, 10.0, 10.3) == pytest.approx(0.2)   # 10.0 -> 10.2
    assert longest_gap(applied, 20.5, 30.0) == pytest.approx(9.5)   # nothing after it
    assert longest_gap([], 0.0, 12.0) == pytest.approx(12.0)
