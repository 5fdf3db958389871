"""The log output: JSON lines in the order logged, batched per event-loop turn."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from paystream.logs import LineWriter, render_json


class CountingFile(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_lines_on_an_event_loop_are_written_once_per_turn_in_order() -> None:
    out = CountingFile()
    writer = LineWriter(out)

    async def requests() -> list[int]:
        seen = []
        writer.info("a1")
        writer.info("a2")
        seen.append(out.writes)  # nothing written yet: the turn is not over
        await asyncio.sleep(0)
        seen.append(out.writes)
        writer.info("b1")
        writer.warning("b2")  # a warning goes out at once, after what came before it
        seen.append(out.writes)
        return seen

    assert asyncio.run(requests()) == [0, 1, 2]
    assert out.getvalue().splitlines() == ["a1", "a2", "b1", "b2"]


def test_lines_without_an_event_loop_are_written_at_once() -> None:
    out = CountingFile()
    writer = LineWriter(out)
    writer.info("x")
    assert out.getvalue() == "x\n" and out.writes == 1


def test_render_json_never_raises_on_what_orjson_refuses() -> None:
    line = render_json({"event": "e", "raw": 2**80, "by_partition": {3: 7}})
    assert json.loads(line) == {"event": "e", "raw": 2**80, "by_partition": {"3": 7}}


def test_the_exit_flush_survives_a_closed_file() -> None:
    out = io.StringIO()
    writer = LineWriter(out)
    writer._pending.append("collected on a loop that never turned again")
    out.close()  # e.g. a test's captured stdout, closed before the interpreter exits
    writer._flush_at_exit()  # what atexit runs: must not raise


def test_a_flush_lost_with_a_closed_loop_does_not_hold_later_lines() -> None:
    out = CountingFile()
    writer = LineWriter(out)
    lost = asyncio.new_event_loop()

    async def log_then_exit() -> None:
        writer.info("logged as the loop ends")
        raise SystemExit  # leaves the loop at once, its queued flush never run

    with pytest.raises(SystemExit):
        lost.run_until_complete(log_then_exit())
    lost.close()

    async def next_loop() -> None:
        writer.info("on the next loop")
        await asyncio.sleep(0)

    asyncio.run(next_loop())
    assert out.getvalue().splitlines() == ["logged as the loop ends", "on the next loop"]
