"""Every consumer metric, declared once. Labels: `group` is the consumer group.

Scraped from the consumer's own port (`--metrics-port`); one process = one registry.
"""

from __future__ import annotations

import json

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from paystream.env import read_one
from paystream.process_settings import ProcessSettings

# Records fetched but not yet read, per partition, as librdkafka reports it in its
# statistics; only partitions whose fetch_state is "active" (others report stale -1s).
CONSUMER_LAG = Gauge(
    "paystream_consumer_lag", "Messages behind the partition end",
    ["group", "topic", "partition"])
# Messages whose batch committed, by what became of them (applied, duplicate,
# insufficient_funds, dead_lettered, mirrored, ...).
MESSAGES = Counter(
    "paystream_consumer_messages_total", "Messages processed, by outcome",
    ["group", "outcome"])
# Batches whose DB transaction committed.
BATCHES = Counter("paystream_consumer_batches_total", "Batches committed", ["group"])
# Messages per polled batch.
BATCH_SIZE = Histogram(
    "paystream_consumer_batch_size", "Messages per batch", ["group"],
    buckets=(1, 10, 50, 100, 250, 500, 1000, 2000, 5000, 10000))
# From BEGIN to COMMIT of the batch transaction, including the DLQ flush in between.
DB_TRANSACTION_SECONDS = Histogram(
    "paystream_consumer_db_transaction_seconds", "Batch transaction latency", ["group"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
# The synchronous offset commit after the DB commit, retries included.
COMMIT_SECONDS = Histogram(
    "paystream_consumer_commit_seconds", "Offset commit latency", ["group"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5))
# Retries, by failure class and source: transient_db, transient_broker, transient_dlq,
# deterministic_other (an error the handler could not isolate), and commit (offsets).
RETRIES = Counter(
    "paystream_consumer_retries_total", "Retries after a failure", ["group", "kind"])
# Messages sent to the DLQ topic (acknowledged by the broker), by reason and kind:
# `judged` (the handler's verdict on an untrusted record) or `unexpected` (the handler
# raised on it; only these count against the DLQ limit: consumers/dead_letters/send.py).
DEAD_LETTERS = Counter(
    "paystream_consumer_dead_letters_total", "Dead letters produced",
    ["group", "reason", "kind"])
# Rebalance callbacks, by kind: assign, revoke, lost.
REBALANCES = Counter(
    "paystream_consumer_rebalances_total", "Rebalance events", ["group", "kind"])
# Partitions paused while the consumer waits out a transient failure.
PAUSED_PARTITIONS = Gauge(
    "paystream_consumer_paused_partitions", "Partitions paused", ["group"])
# 1 while the consumer is stalled on a transient failure; alert when it stays 1.
STALLED = Gauge("paystream_consumer_stalled", "1 while retrying a failed batch", ["group"])
# 1 while the group is stopped by its DLQ limit (a consumer_stops row): nothing is
# consumed until `paystream consume resume GROUP` deletes the row.
STOPPED = Gauge("paystream_consumer_stopped",
                "1 while the group is stopped by its DLQ limit, until resumed", ["group"])
# When the current stall began (unix seconds), 0 when not stalled.
STALL_STARTED = Gauge(
    "paystream_consumer_stall_started_seconds", "Start of the current stall", ["group"])
# Now minus the Kafka timestamp of the last message whose batch committed.
LAST_EVENT_AGE = Gauge(
    "paystream_consumer_last_event_age_seconds",
    "End-to-end age of the last applied event at its commit", ["group"])
# Offset commits that failed for good (the partition was revoked or the member fenced);
# the batch is already in the DB, so redelivery is a no-op.
COMMIT_FAILURES = Counter(
    "paystream_consumer_commit_failures_total", "Offset commits given up", ["group", "error"])


def serve(port: int) -> None:
    """Expose /metrics on `port` (0 disables: tests run many consumers side by side),
    on loopback unless PAYSTREAM_METRICS_HOST names another address (a scraper on
    another machine): metrics name users' groups and lag, not for the internet."""
    if port:
        start_http_server(port, addr=read_one(ProcessSettings, "metrics_host"))


def record_statistics(group: str, stats_json: str) -> None:
    """stats_cb: publish per-partition consumer lag from librdkafka's statistics."""
    try:
        stats = json.loads(stats_json)
    except ValueError:
        return
    for topic, tstats in (stats.get("topics") or {}).items():
        for part, pstats in (tstats.get("partitions") or {}).items():
            if part == "-1" or pstats.get("fetch_state") != "active":
                continue
            lag = pstats.get("consumer_lag")
            if isinstance(lag, int) and lag >= 0:
                CONSUMER_LAG.labels(group, topic, part).set(lag)
