"""The chaos run's faults on a replicated Kafka cluster: SIGKILL a broker, or the active
controller, under load; keep the node down while the pipeline goes on with the other
two; start it again and wait until every partition has all its replicas in sync. And
the stall each one caused: the longest time during which no new event got applied.

Each fault is verified as the others are: the node's pid gone and its port closed after
the kill, a new controller elected by the survivors (a controller kill), the node back
as another pid and registered, and no partition under-replicated before the run goes
on (so the next fault never meets a partition with one replica in sync)."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from paystream.chaos import processes as px
from paystream.kafka_nodes import KafkaNode
from paystream.stack import kafka, quorum
from paystream.stack.process import read_pid, wait_until
from paystream.stack.settings import StackSettings

BROKER_KILL, CONTROLLER_KILL = "broker-kill", "controller-kill"
NODE_FAULTS = (BROKER_KILL, CONTROLLER_KILL)
# How long a killed node stays down before it is started again (which takes seconds
# more): past an election (~2 s) and the new controller's broker session timeout (9 s,
# Kafka's default), so the survivors fence it and take over its partitions, which is
# what the run must show; not much longer, to keep the test suite's run short.
OUTAGE_S = (12.0, 14.0)
ELECTION_TIMEOUT_S = 30.0
CATCH_UP_TIMEOUT_S = 60.0
IN_SYNC_TIMEOUT_S = 120.0


@dataclass
class NodeFault:
    """One node fault, its wall-clock times (time.time(), the clock Postgres' now() reads)
    and what was seen."""

    kind: str
    node_id: int
    killed_at: float
    down_s: float = 0.0
    new_controller: int | None = None
    elected_after_s: float | None = None
    # The first moment after the fault that the run injected anything else (the end of
    # the window its stall is looked for in).
    window_end: float | None = None
    stall_s: float | None = None


def kill_node(s: StackSettings, kind: str, rng: random.Random,
              caught_up: Callable[[], bool]) -> NodeFault:
    """SIGKILL a broker that is not the active controller (BROKER_KILL) or the active
    controller (CONTROLLER_KILL); keep it down for an outage; start it again; return
    once every partition is back in sync. Raises when a step cannot be verified.

    It waits first (up to CATCH_UP_TIMEOUT_S) until `caught_up()`: the pipeline has caught
    up, so the stall it measures is its own and not what an earlier fault (a Connect
    restart, say) left."""
    deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
    while not caught_up() and time.monotonic() < deadline:
        time.sleep(0.2)
    leader = quorum.active_controller(s)
    if leader is None:
        raise RuntimeError("no active controller before the fault")
    if kind == CONTROLLER_KILL:
        victim = _node(s, leader.node_id)
    else:
        victim = rng.choice([n for n in s.kafka_nodes if n.node_id != leader.node_id])
    before = read_pid(kafka.pid_file(s, victim))
    if before is None or not px.port_open(victim.client_port):
        raise RuntimeError(f"node {victim.node_id} was not serving before the fault")
    fault = NodeFault(kind, victim.node_id, time.time())
    px.sigkill(before)
    wait_until(f"kafka-{victim.node_id}", "port closed after the kill",
               lambda: not px.port_open(victim.client_port), timeout=30, interval=0.05)
    if kind == CONTROLLER_KILL:
        new = _wait_for_new_controller(s, victim.node_id)
        fault.new_controller, fault.elected_after_s = new.node_id, time.time() - fault.killed_at
    time.sleep(max(0.0, fault.killed_at + rng.uniform(*OUTAGE_S) - time.time()))
    kafka.start(s)  # the missing node; returns once every node serves
    fault.down_s = time.time() - fault.killed_at
    after = read_pid(kafka.pid_file(s, victim))
    if after is None or after == before:
        raise RuntimeError(f"node {victim.node_id} did not come back as a new process")
    wait_until("kafka", "every partition in sync again",
               lambda: quorum.under_replicated(s) == [], timeout=IN_SYNC_TIMEOUT_S,
               interval=0.5)
    return fault


def _node(s: StackSettings, node_id: int) -> KafkaNode:
    return next(n for n in s.kafka_nodes if n.node_id == node_id)


def _wait_for_new_controller(s: StackSettings, old: int) -> quorum.Leader:
    deadline = time.monotonic() + ELECTION_TIMEOUT_S
    while time.monotonic() < deadline:
        leader = quorum.active_controller(s)
        if leader is not None and leader.node_id != old:
            return leader
        time.sleep(0.02)
    raise RuntimeError(f"no new controller {ELECTION_TIMEOUT_S:.0f} s after killing node {old}")


def longest_gap(applied: Sequence[float], start: float, end: float) -> float:
    """The longest time within [start, end] with no event applied, `applied` being the
    sorted times events were applied at: the first gap counts from `start` (the fault,
    not what stalled before it); a window with nothing applied is stalled to `end`."""
    inside = [t for t in applied if start < t <= end]
    times = [start, *inside]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    if not inside:
        gaps.append(end - start)
    return max(gaps)


def measure_stalls(faults: Sequence[NodeFault], applied: Sequence[float]) -> None:
    for fault in faults:
        end = fault.window_end if fault.window_end is not None else fault.killed_at + 120
        fault.stall_s = longest_gap(applied, fault.killed_at, end)


def describe(fault: NodeFault) -> str:
    elected = ("" if fault.new_controller is None else
               f", new controller node {fault.new_controller} in "
               f"{fault.elected_after_s:.1f} s")
    stall = "?" if fault.stall_s is None else f"{fault.stall_s:.1f} s"
    return (f"node fault: {fault.kind} node {fault.node_id}{elected}, down "
            f"{fault.down_s:.1f} s, no event applied for {stall}")
