"""One frozen, validated settings object per consumer process.

Every time budget is derived from a Kafka setting it must fit into, so changing
`max.poll.interval.ms` cannot silently break the retry loop or the revoke commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from paystream.env import SettingsError
from paystream.kafka_nodes import kafka_bootstrap

# A configuration the consumer refuses to start with: the one settings error type, so
# every command reports it the same way (exit 2 with the reason).
ConfigError = SettingsError


@dataclass(frozen=True)
class ConsumerSettings:
    group: str
    topics: tuple[str, ...]
    dlq_topic: str
    bootstrap: str = field(default_factory=kafka_bootstrap)
    batch_size: int = 1000
    batch_timeout_s: float = 0.5
    session_timeout_ms: int = 10_000
    max_poll_interval_ms: int = 60_000
    statistics_interval_ms: int = 5_000
    # "classic" uses cooperative-sticky; "consumer" is KIP-848 (rebalancing on the broker).
    group_protocol: str = "classic"
    auto_offset_reset: str = "earliest"
    metrics_port: int = 0
    dlq_limit: int = 100
    dlq_window_s: float = 60.0
    backoff_initial_s: float = 0.2
    backoff_max_s: float = 10.0
    # librdkafka properties layered over the defaults (validated: see client.py).
    kafka_overrides: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.topics:
            raise ConfigError("at least one topic is required")
        if self.dlq_topic in self.topics:
            raise ConfigError("the DLQ topic cannot be one of the consumed topics")
        if not 1 <= self.batch_size <= 100_000:
            raise ConfigError("batch size must be between 1 and 100000")
        if self.group_protocol not in ("classic", "consumer"):
            raise ConfigError("group protocol must be 'classic' or 'consumer'")
        if self.dlq_limit < 0 or self.dlq_window_s <= 0:
            raise ConfigError("the DLQ limit needs a non-negative count and a positive window")
        if self.backoff_max_s * 1000 >= self.max_poll_interval_ms / 2:
            raise ConfigError("backoff_max_s must stay well below max.poll.interval.ms")

    @property
    def poll_keepalive_s(self) -> float:
        # While stalled we poll at least this often: a tenth of max.poll.interval.ms
        # keeps the member in the group with a wide margin.
        return min(1.0, self.max_poll_interval_ms / 10_000)

    @property
    def revoke_commit_budget_s(self) -> float:
        # on_revoke runs inside the rebalance: it must finish well within the session
        # timeout, or the group evicts us while we are still committing.
        return self.session_timeout_ms / 1000 / 3

    @property
    def commit_retry_budget_s(self) -> float:
        # A retriable commit error is retried for at most a quarter of the poll interval,
        # after which the offsets stay pending and are retried before the next consume().
        return self.max_poll_interval_ms / 1000 / 4
