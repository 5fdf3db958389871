"""structlog JSON logging, configured once per process by ingest and consumers alike.

Bind the event's trace id with `structlog.contextvars.bind_contextvars(trace_id=...)`
(or `log.bind(trace_id=...)`) so every line of one event's life carries it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import sys
import threading
from typing import Any, TextIO

import orjson
import structlog

from paystream.env import read_one
from paystream.process_settings import ProcessSettings


def configure_logging(service: str, level: str | None = None) -> None:
    """JSON lines on stdout: timestamp, level, service, event, and bound context."""
    lvl = getattr(logging, (level or read_one(ProcessSettings, "log_level")).upper())
    logging.basicConfig(stream=sys.stdout, level=lvl, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=render_json),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=LineWriterFactory(LineWriter(sys.stdout)),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.bind_contextvars(service=service)


def render_json(event_dict: dict[str, Any], **json_kw: Any) -> str:
    """One log line's JSON: orjson (a third of json.dumps' time; the ingest writes a
    line per request), json.dumps for what orjson refuses (integers beyond 64 bits,
    such as raw token amounts), so a log call never raises."""
    try:
        return orjson.dumps(event_dict, default=json_kw.get("default"),
                            option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return json.dumps(event_dict, **json_kw)


class LineWriter:
    """structlog's output: each rendered line to `file`, in the order logged.

    On a thread that runs an asyncio event loop (the ingest), info and debug lines are
    collected and written once per turn of the loop, in one write: a line per request,
    each with its own write and flush, cost the ingest ~15 % of its saturated
    throughput (bench/ingest_bench.py). A line waits at most until the loop's next turn.
    Warnings and errors, and every line logged where no loop runs (consumers, the
    ingest's writer threads), are written at once, after the lines collected before them.
    """

    def __init__(self, file: TextIO) -> None:
        self._file = file
        self._pending: list[str] = []
        self._flush_on: asyncio.AbstractEventLoop | None = None  # has a flush queued
        self._lock = threading.Lock()  # the writer threads log too
        atexit.register(self._flush_at_exit)

    def _at_loop_turn(self, line: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._at_once(line)
            return
        with self._lock:
            self._pending.append(line)
            # Queued per loop, not "first line pending": a flush queued on a loop that
            # closed before running it must not leave later lines waiting for exit.
            queue_flush = self._flush_on is not loop
            self._flush_on = loop
        if queue_flush:
            loop.call_soon(self.flush)

    def _at_once(self, line: str) -> None:
        with self._lock:
            self._pending.append(line)
            self._write_pending()

    def flush(self) -> None:
        with self._lock:
            self._write_pending()

    def _flush_at_exit(self) -> None:
        with contextlib.suppress(ValueError, OSError):  # the file may be closed by then
            self.flush()

    def _write_pending(self) -> None:
        self._flush_on = None
        if self._pending:
            text = "\n".join(self._pending) + "\n"
            self._pending.clear()
            self._file.write(text)
            self._file.flush()

    debug = info = _at_loop_turn
    msg = warning = warn = error = critical = fatal = exception = failure = _at_once


class LineWriterFactory:
    """One LineWriter for every structlog logger of the process."""

    def __init__(self, writer: LineWriter) -> None:
        self._writer = writer

    def __call__(self, *args: Any) -> LineWriter:
        return self._writer
