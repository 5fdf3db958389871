"""structlog JSON logging, configured once per process by ingest and consumers alike.

Bind the event's trace id with `structlog.contextvars.bind_contextvars(trace_id=...)`
(or `log.bind(trace_id=...)`) so every line of one event's life carries it.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog


def configure_logging(service: str, level: str | None = None) -> None:
    """JSON lines on stdout: timestamp, level, service, event, and bound context."""
    lvl = getattr(logging, (level or os.environ.get("PAYSTREAM_LOG_LEVEL", "INFO")).upper())
    logging.basicConfig(stream=sys.stdout, level=lvl, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)
