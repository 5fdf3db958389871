"""What every paystream process reads about itself: its log level and the address its
/metrics listens on."""

from __future__ import annotations

from pydantic import Field

from paystream.env import EnvSettings


class ProcessSettings(EnvSettings):
    """Read by every paystream process."""

    doc_section = "Logging and metrics"

    log_level: str = Field("INFO", alias="PAYSTREAM_LOG_LEVEL",
                           description="the level of every process's JSON log lines")
    # Metrics name users' groups and lag: loopback unless a scraper on another machine
    # needs them.
    metrics_host: str = Field(
        "127.0.0.1", alias="PAYSTREAM_METRICS_HOST",
        description="the address the consumers', the notifier's, the finality watcher's and "
                    "the health exporter's `/metrics` listen on (`paystream health --bind` "
                    "overrides)")
