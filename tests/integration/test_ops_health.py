"""`paystream health` and its Prometheus gauges against the real stack.

Stuck-event detection is made testable in seconds by its threshold: the test's event
was received ten years ago and the threshold is ~9.5 years, so no other test's events
(which may legitimately sit in `received` for a moment) count.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import httpx
import psycopg2.extensions
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry

from paystream import credentials
from paystream.kafka_nodes import kafka_bootstrap
from paystream.launch import free_port, paystream_argv
from paystream.ops.health import HealthChecker, HealthCollector, HealthSettings
from tests.support.consumers import admin_security
from tests.support.ids import unique

ROOT = Path(__file__).resolve().parents[2]
STUCK_AFTER = str(300_000_000)  # seconds, ~9.5 years


def paystream(*args: str, timeout: float = 120, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess:
    return subprocess.run(paystream_argv(*args), cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def health_json(*args: str, env: dict[str, str] | None = None
                ) -> tuple[int, dict[str, list[dict]]]:
    done = paystream("health", "--json", *args, env=env)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    by_check: dict[str, list[dict]] = {}
    for row in json.loads(done.stdout):
        by_check.setdefault(row["check"], []).append(row)
    return done.returncode, by_check


@pytest.fixture
def stuck_event(db):
    """A payment event `received` ten years ago and never applied; removed afterwards."""
    event_id = unique("ops-stuck")
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO payment_events (event_id, provider, event_type, user_id, asset,"
            " amount, content_hash, trace_id, payload, received_at)"
            " VALUES (%s, 'test', 'deposit', 'ops-nobody', 'USDC', 1, 'h', 't', '{}',"
            " now() - interval '10 years');"
            " INSERT INTO event_status (event_id, status_changed_at)"
            " VALUES (%s, now() - interval '10 years')", (event_id, event_id))
    yield event_id
    with db.cursor() as cur:  # its event_status row goes with it (ON DELETE CASCADE)
        cur.execute("DELETE FROM payment_events WHERE event_id = %s", (event_id,))


def test_stuck_event_shows_in_health_and_metric_then_clears(db, stuck_event) -> None:
    checks = ("--check", "stuck_events", "--check", "oldest_unapplied")
    code, rows = health_json(*checks, "--stuck-after", STUCK_AFTER)
    assert code == 1
    assert rows["stuck_events"][0]["value"] == "1"
    assert rows["stuck_events"][0]["verdict"] == "unhealthy"
    assert rows["oldest_unapplied"][0]["verdict"] == "warn"
    # The table an operator reads.
    table = paystream("health", *checks, "--stuck-after", STUCK_AFTER)
    assert table.returncode == 1
    line = next(x for x in table.stdout.splitlines() if "events received" in x)
    assert line.split()[-2:] == ["stuck)", "unhealthy"] and " 1 " in line

    settings = HealthSettings.from_env(stuck_after_s=float(STUCK_AFTER))
    registry = CollectorRegistry()
    registry.register(HealthCollector(HealthChecker(settings),
                                      ["stuck_events", "oldest_unapplied"]))
    assert registry.get_sample_value("paystream_stuck_events") == 1
    assert registry.get_sample_value("paystream_oldest_unapplied_event_age_seconds") > 3e8
    assert registry.get_sample_value("paystream_health_check_verdict",
                                     {"check": "stuck_events"}) == 2

    # Resolved: the consumer applied it.
    with db.cursor() as cur:
        cur.execute("UPDATE event_status SET status = 'applied', status_changed_at = now()"
                    " WHERE event_id = %s", (stuck_event,))
    code, rows = health_json(*checks, "--stuck-after", STUCK_AFTER)
    assert code == 0
    assert rows["stuck_events"][0]["value"] == "0"
    assert rows["stuck_events"][0]["verdict"] == "ok"
    assert registry.get_sample_value("paystream_stuck_events") == 0
    assert registry.get_sample_value("paystream_health_check_verdict",
                                     {"check": "stuck_events"}) == 0


def test_replayed_event_waits_from_its_status_change(db, stuck_event) -> None:
    # A DLQ replay makes an old event `received` again: it is not stuck until it waits.
    with db.cursor() as cur:
        cur.execute("UPDATE event_status SET status_changed_at = now() WHERE event_id = %s",
                    (stuck_event,))
    code, rows = health_json("--check", "stuck_events", "--stuck-after", STUCK_AFTER)
    assert code == 0 and rows["stuck_events"][0]["value"] == "0"


SENT: list[bytes] = []  # every statement a _Recording cursor executed, as sent


class _Recording(psycopg2.extensions.cursor):
    def execute(self, query, vars=None) -> None:  # type: ignore[no-untyped-def]
        super().execute(query, vars)
        assert self.query is not None
        SENT.append(self.query)


def _plan_nodes(plan: dict) -> list[tuple[str, str | None, str | None]]:
    nodes = [(plan["Node Type"], plan.get("Relation Name"), plan.get("Index Name"))]
    for child in plan.get("Plans", ()):
        nodes += _plan_nodes(child)
    return nodes


def test_the_stuck_events_check_reads_the_received_index_alone(db, stuck_event) -> None:
    """The stuck-events query reads event_status's partial index of the received rows:
    never payment_events (its status moved out), never a walk of every status row."""
    settings = HealthSettings.from_env(stuck_after_s=float(STUCK_AFTER))
    SENT.clear()
    with db.cursor(cursor_factory=_Recording) as cur:
        HealthChecker(settings)._event_checks(cur)
    (statement,) = SENT
    with db.cursor() as cur:
        cur.execute("BEGIN; SET LOCAL enable_seqscan = off")
        try:
            cur.execute(b"EXPLAIN (FORMAT JSON) " + statement)
            plan = cur.fetchone()[0]
        finally:
            cur.execute("ROLLBACK")
    nodes = _plan_nodes((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    assert {table for _, table, _ in nodes if table} == {"event_status"}, nodes
    assert any(index == "event_status_received_idx" for _, _, index in nodes), nodes
    assert not any(node == "Seq Scan" for node, _, _ in nodes), nodes


def test_serve_metrics_publishes_every_gauge(stuck_event) -> None:
    port = free_port()
    proc = subprocess.Popen(
        paystream_argv("health", "--serve-metrics", str(port), "--bind", "127.0.0.1",
                       "--stuck-after", STUCK_AFTER, "--reconcile-every", "3600"),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        body = ""
        reconciled = 'paystream_reconciliation_checks_total{scope="full"} 1.0'
        deadline = time.monotonic() + 30
        # Until the full reconciliation (run at start, beside the server) is published.
        while reconciled not in body and time.monotonic() < deadline:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=15).text
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.3)
        assert reconciled in body, body or "the exporter never answered"
        assert "paystream_stuck_events 1.0" in body
        assert "paystream_database_up 1.0" in body
        assert 'paystream_replication_slot_active{slot="paystream_outbox"}' in body
        assert 'paystream_replication_slot_retained_wal_bytes{slot="paystream_outbox"}' in body
        assert ('paystream_consumer_group_lag{group="ledger",topic="paystream.payments"}'
                in body)
        assert 'paystream_consumer_group_members{group="dlq-mirror"}' in body
        assert "paystream_dead_letters_last_hour " in body
        assert 'paystream_connector_running{connector="paystream-outbox"}' in body
        assert 'paystream_health_check_verdict{check="stuck_events"} 2.0' in body
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0


def test_full_health_run_reports_every_check() -> None:
    code, rows = health_json()
    assert set(rows) == {"database", "stuck_events", "oldest_unapplied", "replication_slot",
                         "consumer_lag", "consumer_stops", "dead_letters", "chain_deposits",
                         "chain_scan", "notifications", "statements", "connector"}
    assert rows["database"][0]["verdict"] == "ok"
    slot = rows["replication_slot"][0]
    assert slot["value"].endswith("(active)"), slot
    assert [r["what"] for r in rows["consumer_lag"]] == [
        "group ledger lag on paystream.payments",
        "group dlq-mirror lag on paystream.payments.dlq"]
    assert rows["connector"][0]["value"] == "RUNNING"
    unhealthy = any(r["verdict"] == "unhealthy" for rs in rows.values() for r in rs)
    assert code == (1 if unhealthy else 0)


@pytest.fixture
def lag_topic():
    """A one-partition topic with five messages, deleted afterwards."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap(), **admin_security()})
    topic = unique("ops-lag")
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    except KafkaException as exc:
        pytest.fail(f"Kafka is not reachable at {kafka_bootstrap()} ({exc}); "
                    "run `paystream stack up`")
    producer = Producer({"bootstrap.servers": kafka_bootstrap(), **admin_security()})
    for i in range(5):
        producer.produce(topic, key=b"k", value=str(i).encode())
    assert producer.flush(15) == 0
    yield topic
    admin.delete_topics([topic])[topic].result(15)


def test_the_health_principal_may_not_describe_other_groups(lag_topic) -> None:
    code, rows = health_json("--check", "consumer_lag", "--group", f"{unique('g')}={lag_topic}")
    [row] = rows["consumer_lag"]
    assert "TOPIC_AUTHORIZATION_FAILED" in row["value"] and row["verdict"] == "unhealthy"
    assert code == 1


def test_consumer_lag_is_computed_from_committed_offsets(lag_topic) -> None:
    group = unique("ops-lag-group")
    never = unique("ops-lag-never")
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap(), **admin_security(),
                         "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(lag_topic, 0, 2)], asynchronous=False)
    finally:
        consumer.close()
    # The health principal may describe the production groups only: checking a test's
    # groups takes a principal allowed to, given the way a deployment would give it.
    as_admin = {**os.environ, "PAYSTREAM_KAFKA_USER": "paystream-admin",
                "PAYSTREAM_KAFKA_PASSWORD_FILE": str(credentials.secrets_dir() / "kafka-admin")}
    code, rows = health_json("--check", "consumer_lag", "--group", f"{group}={lag_topic}",
                             "--group", f"{never}={lag_topic}", env=as_admin)
    lags = {r["what"]: (r["value"], r["verdict"]) for r in rows["consumer_lag"]}
    # Three messages after the committed offset 2; nobody consumes: unhealthy.
    assert lags[f"group {group} lag on {lag_topic}"] == ("3 (0 members)", "unhealthy")
    # Never committed: the group would start at the earliest offset.
    assert lags[f"group {never} lag on {lag_topic}"] == ("5 (0 members)", "unhealthy")
    assert code == 1


def test_dead_letters_of_the_last_hour_are_counted(db) -> None:
    topic = unique("ops-dlq-src")
    with db.cursor() as cur:
        cur.execute("INSERT INTO dead_letter_queue (source_topic, source_partition,"
                    " source_offset, error_reason, error_detail, first_seen_at)"
                    " VALUES (%s, 0, 1, 'test', 'recent', now() - interval '5 minutes'),"
                    "        (%s, 0, 2, 'test', 'old', now() - interval '2 hours')",
                    (topic, topic))
    try:
        settings = HealthSettings.from_env()
        before = HealthChecker(settings).run(["dead_letters"])[0]
        assert int(before.value) >= 1
        assert str(before.verdict) in ("warn", "unhealthy")
        with db.cursor() as cur:
            cur.execute("DELETE FROM dead_letter_queue WHERE source_topic = %s"
                        " AND source_offset = 1", (topic,))
        after = HealthChecker(settings).run(["dead_letters"])[0]
        assert int(after.value) == int(before.value) - 1  # the 2-hour-old one never counted
    finally:
        with db.cursor() as cur:
            cur.execute("DELETE FROM dead_letter_queue WHERE source_topic = %s", (topic,))


def test_unreachable_database_is_unhealthy_not_a_crash() -> None:
    port = free_port()  # nothing listens there
    settings = HealthSettings.from_env(
        dsn=f"postgresql://paystream:paystream@127.0.0.1:{port}/paystream", timeout_s=2)
    results = HealthChecker(settings).run(["database", "stuck_events"])
    assert [(r.name, str(r.verdict)) for r in results] == [
        ("database", "unhealthy"), ("stuck_events", "unhealthy")]
    registry = CollectorRegistry()
    registry.register(HealthCollector(HealthChecker(settings), ["database"]))
    assert registry.get_sample_value("paystream_database_up") == 0


@pytest.fixture
def old_chain_deposits(db):
    """A deposit waiting for finality for ten years, and one whose settlement the watcher
    emitted ten years ago and the ledger never applied; removed afterwards."""
    ids = {state: unique(f"ops-chain-{state}") for state in ("pending", "finalizing")}
    with db.cursor() as cur:
        for state, event_id in ids.items():
            cur.execute(
                "INSERT INTO chain_deposits (event_id, network, tx_hash, block_number,"
                " recipient, raw_value, chain, user_id, asset, amount, trace_id, state,"
                " recorded_at, decided_at) VALUES (%s, 'OPS_TEST', %s, 1, '0xabc', 1, '{}',"
                " 'ops-nobody', 'OPS_TEST:native', 1, 't', %s, now() - interval '10 years',"
                " CASE WHEN %s = 'finalizing' THEN now() - interval '10 years' END)",
                (event_id, "0x" + event_id, state, state))
    yield ids
    with db.cursor() as cur:
        cur.execute("DELETE FROM chain_deposits WHERE event_id = ANY(%s)", (list(ids.values()),))


def test_chain_deposits_waiting_and_settlements_stuck_show_in_health(old_chain_deposits):
    settings = HealthSettings.from_env(stuck_after_s=float(STUCK_AFTER),
                                       deposit_wait_warn_s=1e8, deposit_wait_unhealthy_s=3e8)
    waiting, settling = HealthChecker(settings).run(["chain_deposits"])
    assert waiting.component == "finality" and waiting.verdict.name == "UNHEALTHY"
    assert float(waiting.value.split()[0]) > 3e8
    assert settling.component == "ledger" and settling.value == "1"
    assert settling.verdict.name == "UNHEALTHY"
    registry = CollectorRegistry()
    registry.register(HealthCollector(HealthChecker(settings), ["chain_deposits"]))
    assert registry.get_sample_value("paystream_stuck_chain_settlements") == 1
    assert registry.get_sample_value(
        "paystream_oldest_waiting_chain_deposit_age_seconds") > 3e8
    assert registry.get_sample_value("paystream_health_check_verdict",
                                     {"check": "chain_deposits"}) == 2


def test_chain_deposit_check_is_ok_below_its_thresholds(old_chain_deposits):
    # The same rows, judged with thresholds above their age: nothing to report.
    settings = HealthSettings.from_env(stuck_after_s=1e10, deposit_wait_warn_s=1e10,
                                       deposit_wait_unhealthy_s=2e10)
    waiting, settling = HealthChecker(settings).run(["chain_deposits"])
    assert (waiting.verdict.name, settling.verdict.name) == ("OK", "OK")
    assert settling.value == "0"
