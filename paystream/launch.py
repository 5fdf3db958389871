"""Launching `paystream` itself as a child process. The supervisor (`paystream run`), the
chaos run, the benchmarks and the tests all start paystream services this one way."""

from __future__ import annotations

import sys


def paystream_argv(*args: str) -> list[str]:
    """The command line that runs `paystream ARGS` with this interpreter: no PATH lookup,
    so it works from a venv that is not activated and under `python -m paystream.cli`."""
    return [sys.executable, "-m", "paystream.cli", *args]
