"""docs/benchmarks.md holds today's figure per benchmark (command, baseline, date) and
nothing older: history goes to the CHANGELOG, so the page stays at most 250 lines."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmarks_page_keeps_to_today_s_figures() -> None:
    lines = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"{len(lines)} lines: move what is history to CHANGELOG.md"
