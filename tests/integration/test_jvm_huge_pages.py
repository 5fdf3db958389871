"""The running broker and Connect keep their heaps in transparent huge pages
(stack/kafka.py TRANSPARENT_HUGE_PAGES), read from the kernel's own accounting of each
process's memory, not from our command line alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from paystream.stack import connect, kafka
from paystream.stack.process import read_pid
from paystream.stack.settings import StackSettings

THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _anon_huge_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    raise AssertionError(f"no AnonHugePages line for pid {pid}")


@pytest.mark.parametrize("component", ["kafka", "connect"])
def test_the_jvm_heap_is_in_transparent_huge_pages(component: str) -> None:
    s = StackSettings.from_env()
    pid = read_pid(kafka.pid_file(s) if component == "kafka" else connect.pid_file(s))
    assert pid is not None, f"the stack's {component} is not running"
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert kafka.TRANSPARENT_HUGE_PAGES.encode() in argv
    mode = THP_MODE.read_text()
    assert "[never]" not in mode, f"this machine's kernel has THP off: {mode}"
    # Seen without the option: 0 kB in both JVMs; with it, 360-500 MB after a few bench
    # runs, and every heap region G1 has used is in 2 MB pages from its first touch.
    assert _anon_huge_kib(pid) >= 32 * 1024, (component, _anon_huge_kib(pid))
