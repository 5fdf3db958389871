"""The chaos suite's short form on the replicated cluster
(docs/operations.md#a-replicated-cluster): a broker, then the active controller, SIGKILLed
under load and kept down while the pipeline goes on with two nodes; lost 0, applied twice
0, and the stall each caused measured.

Beside the run's own checks: every record batch the pipeline wrote to the payments and
dead-letter topics carries a producer id in the brokers' segment files (Kafka's
DumpLogSegments), so Connect's producer and the ledger's DLQ producer were idempotent."""

from __future__ import annotations

import re
import subprocess

from paystream.launch import paystream_argv
from paystream.schema.events import PAYMENTS_DLQ_TOPIC, PAYMENTS_TOPIC
from paystream.stack.settings import StackSettings
from tests.support.kafka_tools import record_batches

NODE_FAULT = re.compile(
    r"node fault: (?P<kind>broker-kill|controller-kill) node (?P<node>\d)"
    r"(?:, new controller node (?P<new>\d) in (?P<elected>[\d.]+) s)?"
    r", down (?P<down>[\d.]+) s, no event applied for (?P<stall>[\d.]+) s")


def test_short_chaos_run_on_three_nodes_loses_nothing_and_measures_the_stalls(
        cluster: StackSettings):
    done = subprocess.run(paystream_argv("chaos", "--short", "--brokers", "3"),
                          capture_output=True, text=True, timeout=1200)
    out = done.stdout + done.stderr
    print(out)  # the report, in the test log
    assert done.returncode == 0, out[-5000:]
    assert "\nlost = 0\n" in out
    assert "\ndouble-applied = 0\n" in out
    assert "with no fault to explain it: 0\n" in out
    assert "kafka nodes: 3\n" in out
    faults = {k: int(v) for k, v in re.findall(
        r"([a-z-]+)=(\d+)", re.search(r"faults injected: (.*)", out).group(1))}
    assert faults["broker-kill"] >= 1 and faults["controller-kill"] >= 1, faults
    assert "broker-restart" not in faults
    for kind in ("connect-restart", "postgres-restart", "ingest-restart", "consumer-sigkill"):
        assert faults[kind] >= 1, kind
    seen = [m.groupdict() for m in NODE_FAULT.finditer(out)]
    assert {f["kind"] for f in seen} == {"broker-kill", "controller-kill"}, out[-3000:]
    for fault in seen:
        # Two nodes of three carry on: events are applied again before the killed
        # node is back (a stall as long as the outage would be a pinned pipeline).
        assert float(fault["stall"]) < float(fault["down"]), fault
        if fault["kind"] == "controller-kill":
            assert fault["new"] not in (None, fault["node"]), fault
    for topic in (PAYMENTS_TOPIC, PAYMENTS_DLQ_TOPIC):
        batches = record_batches(cluster, 1, topic)
        assert batches, topic
        assert [b for b in batches if b.producer_id < 0] == [], topic
