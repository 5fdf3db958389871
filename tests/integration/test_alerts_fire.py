"""The shipped alert rules fire for real: the pipeline is broken four ways and the
stack's own Prometheus (`stack up --prometheus`, which `make test` runs) is read until
the matching alert is `firing`; then the fault is repaired and the alert resolves.

Time is compressed: the rules loaded are the shipped ones with every `for:` and range
divided by 20 (tests/support/prometheus.py), beside the shipped rules, and removed at
the end. The times to fire and to resolve are printed (`pytest -rP` shows them): at
scale 20, a `for: 2m` is 6 s.

1. a Debezium task FAILED -> PaystreamConnectorNotRunning
2. a dead-letter flood -> PaystreamDeadLetterFlood
3. a group stopped by its DLQ limit -> PaystreamConsumerGroupStopped
4. a chain scanner's cursor far behind its node -> PaystreamChainScanLagging
The ledger group stopped while events arrive (PaystreamConsumerStalled) fires, pages
and resolves in tests/integration/test_alerts_notify.py.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from paystream import kafka_security
from paystream.connectors.endpoint import rest_auth
from paystream.schema.db import connect, database_url
from paystream.schema.outbox import emit
from paystream.stack import connect as stack_connect
from paystream.stack.prometheus import SHIPPED_RULES
from paystream.stack.settings import StackSettings
from tests.support.chain.node import running_anvil
from tests.support.consumers import admin, create_topic, drained, end_offsets
from tests.support.ids import unique
from tests.support.observed import Observed
from tests.support.prometheus import FACTOR, LivePrometheus
from tests.support.waiting import wait_for

# Seconds an alert may take to fire once its `for:` (÷ FACTOR) has passed: scrapes
# and evaluations every second, a loaded 2-core CI machine.
SLACK_S = 30


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    live = LivePrometheus.of_this_stack()
    obs = Observed(live, tmp_path_factory.mktemp("alerts"))
    obs.setup()
    live.accelerate_rules()
    try:
        obs.start_ledger()
        obs.start_health()
        yield obs
    finally:
        obs.stop_all()
        live.restore_rules()


def _report(what: str, seconds: float) -> None:
    print(f"{what}: {seconds:.1f} s (rules ÷{FACTOR})")


def test_a_dead_letter_flood_fires_and_resolves(observed: Observed) -> None:
    live, group = observed.live, observed.group
    observed.events(5)
    wait_for("the ledger applying good events", lambda: drained(group, observed.topic), 60)
    assert live.alert_state("PaystreamDeadLetterFlood", group=group) == "inactive"
    # 60 records no outbox wrote (unknown_event), over 6 s: more than the rule's 20 per
    # window, fewer than the ledger's own stop limit (100 a minute).
    started = time.monotonic()
    for _ in range(6):
        observed.events(10, stored=False)
        time.sleep(1)
    live.wait_alert("firing", "PaystreamDeadLetterFlood", 60 / FACTOR + 6 + SLACK_S,
                    group=group)
    fired = time.monotonic() - started
    _report("PaystreamDeadLetterFlood fired after the flood began", fired)
    assert observed.procs["ledger"].poll() is None, observed.log_tail("ledger")
    # Repaired: nothing more is dead-lettered; once the window holds no increase the
    # alert resolves.
    resolved = live.wait_alert("inactive", "PaystreamDeadLetterFlood",
                               300 / FACTOR + SLACK_S, group=group)
    _report("PaystreamDeadLetterFlood resolved after the flood ended", resolved)


@contextlib.contextmanager
def _unroutable_outbox_row(s: StackSettings) -> Iterator[str]:
    """An outbox row whose aggregate type routes to a topic Connect may not write (none
    exists, no ACL): the task fails on it for good, the documented failure of a new
    aggregate type deployed before its topic. Repaired on the way out whatever
    happened: the topic and its ACL created, the task restarted and RUNNING, and then
    the topic and ACL removed again."""
    aggregate = unique("obsunrouted")
    topic = f"paystream.{aggregate}"
    conn = connect(database_url("owner"))
    with conn, conn.cursor() as cur:
        emit(cur, aggregatetype=aggregate, aggregateid="obs", event_type="probe",
             event_id=aggregate, payload={"probe": True}, trace_id=aggregate)
    conn.close()
    acl = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                     f"User:{kafka_security.username(kafka_security.CONNECT)}", "*",
                     AclOperation.WRITE, AclPermissionType.ALLOW)
    try:
        yield topic
    finally:
        client = admin()
        create_topic(topic, partitions=1)
        for fut in client.create_acls([acl], request_timeout=30).values():
            fut.result(30)
        resp = httpx.post(f"{s.connect_url}/connectors/{s.connector_name}/restart",
                          params={"includeTasks": "true", "onlyFailed": "true"},
                          auth=rest_auth(), timeout=30)
        assert resp.status_code in (202, 204), resp.text
        stack_connect.wait_running(s, timeout=120)
        wait_for(f"the stuck row delivered to {topic}",
                 lambda: sum(end_offsets(topic).values()) >= 1, 60)
        flt = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                               None, None, AclOperation.ANY, AclPermissionType.ANY)
        for fut in client.delete_acls([flt], request_timeout=30).values():
            fut.result(30)
        for fut in client.delete_topics([topic], operation_timeout=30).values():
            fut.result(30)


def test_a_failed_connector_task_fires_connector_not_running(observed: Observed) -> None:
    live, s = observed.live, StackSettings.from_env()
    stack_connect.wait_running(s, timeout=120)
    assert live.alert_state("PaystreamConnectorNotRunning",
                            connector=s.connector_name) == "inactive"
    broken = time.monotonic()
    with _unroutable_outbox_row(s):
        wait_for("the connector task FAILED",
                 lambda: "FAILED" in stack_connect.connector_state(s), 60, 0.2)
        failed = time.monotonic()
        _report("Debezium task FAILED after the unroutable outbox row", failed - broken)
        live.wait_alert("firing", "PaystreamConnectorNotRunning", 120 / FACTOR + SLACK_S,
                        connector=s.connector_name)
        _report("PaystreamConnectorNotRunning fired after the task FAILED",
                time.monotonic() - failed)
        repaired_at = time.monotonic()
    live.wait_alert("inactive", "PaystreamConnectorNotRunning", SLACK_S,
                    connector=s.connector_name)
    _report("PaystreamConnectorNotRunning resolved after the repair",
            time.monotonic() - repaired_at)


def test_a_stopped_group_fires_consumer_group_stopped_at_once(observed: Observed) -> None:
    """A consumer_stops row (what the ledger records when its DLQ limit trips) is seen
    by the health exporter and pages at its first evaluation; deleted (`paystream
    consume resume`), the alert resolves and the running ledger rejoins."""
    live, group = observed.live, observed.group
    assert live.alert_state("PaystreamConsumerGroupStopped", group=group) == "inactive"
    conn = connect(database_url("owner"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO consumer_stops (group_id, reason, detail, host, pid)"
                        " VALUES (%s, 'dlq_limit_exceeded', 'test_alerts_fire', 'test', 0)",
                        (group,))
        fired = live.wait_alert("firing", "PaystreamConsumerGroupStopped", SLACK_S,
                                group=group)
        _report("PaystreamConsumerGroupStopped fired after the stop", fired)
    finally:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM consumer_stops WHERE group_id = %s", (group,))
        conn.close()
    resolved = live.wait_alert("inactive", "PaystreamConsumerGroupStopped", SLACK_S,
                               group=group)
    _report("PaystreamConsumerGroupStopped resolved after the resume", resolved)
    assert observed.procs["ledger"].poll() is None, observed.log_tail("ledger")


def test_a_lagging_chain_scanner_fires_scan_lagging(observed: Observed) -> None:
    """A scanner cursor 150 blocks behind its node (an anvil of this test's own, a network
    only this test names): the health exporter's lag fires the alert; the cursor gone,
    it resolves."""
    live, network = observed.live, unique("ANVIL_ALERT").upper().replace("-", "_")
    with running_anvil(18667, name="anvil-alert-test") as chain:
        chain.mine(150 + chain.finality_depth)
        observed.stop("health")
        observed.start_health({"PAYSTREAM_FINALITY_NETWORKS": f"ETH_MAINNET,{network}",
                               f"ETH_RPC_URL_{network}": chain.url})
        conn = connect(database_url("owner"))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute("INSERT INTO chain_scan_cursors (network, block_number,"
                            " block_hash) VALUES (%s, 0, %s)", (network, chain.block(0)["hash"]))
            # its `for: 10m`, compressed, then the slack
            fired = live.wait_alert("firing", "PaystreamChainScanLagging",
                                    600 / FACTOR + SLACK_S, network=network)
            _report("PaystreamChainScanLagging fired after the lag", fired)
        finally:
            with conn.cursor() as cur:
                cur.execute("DELETE FROM chain_scan_cursors WHERE network = %s", (network,))
            conn.close()
        resolved = live.wait_alert("inactive", "PaystreamChainScanLagging", SLACK_S,
                                   network=network)
        _report("PaystreamChainScanLagging resolved once the cursor went", resolved)


def test_the_accelerated_rules_are_the_shipped_ones(observed: Observed) -> None:
    """What fired above is the shipped rule set, only faster: every shipped alert is
    loaded twice, once as shipped and once accelerated, same expression shape."""
    groups = httpx.get(f"{observed.live.cfg.url}/api/v1/rules", timeout=10).json()
    rules = [r for g in groups["data"]["groups"] for r in g["rules"]]
    shipped = {r["name"] for r in rules if "paystream_rules" not in r["labels"]}
    accelerated = {r["name"] for r in rules if r["labels"].get("paystream_rules")}
    in_file = {r["alert"] for g in yaml.safe_load(SHIPPED_RULES.read_text())["groups"]
               for r in g["rules"]}
    assert shipped == accelerated == in_file
