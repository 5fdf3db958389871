"""Consumer lag comes from librdkafka statistics, only for actively fetched partitions."""

from __future__ import annotations

import json

from prometheus_client import REGISTRY

from paystream.consumers import metrics


def _lag(group: str, partition: str) -> float | None:
    return REGISTRY.get_sample_value("paystream_consumer_lag",
                                     {"group": group, "topic": "t", "partition": partition})


def test_lag_only_for_active_partitions() -> None:
    stats = {"topics": {"t": {"partitions": {
        "0": {"fetch_state": "active", "consumer_lag": 42},
        "1": {"fetch_state": "stopped", "consumer_lag": 7},
        "2": {"fetch_state": "active", "consumer_lag": -1},
        "-1": {"fetch_state": "none", "consumer_lag": 0},
    }}}}
    metrics.record_statistics("lag-test", json.dumps(stats))
    assert _lag("lag-test", "0") == 42
    assert _lag("lag-test", "1") is None
    assert _lag("lag-test", "2") is None
    assert _lag("lag-test", "-1") is None


def test_garbage_statistics_are_ignored() -> None:
    metrics.record_statistics("lag-test-2", "{not json")
    assert _lag("lag-test-2", "0") is None
