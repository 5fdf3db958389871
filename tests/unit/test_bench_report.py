"""bench/report.py draws every plot from results files shaped as the benchmarks write
them (bench/results.py), and says which it skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import results  # noqa: E402  (bench/)


def _doc(bench: str, figures: dict) -> dict:
    return {"bench": bench, "command": f"bench/{bench}.py", "date": "2026-12-03 10:00 UTC",
            "commit": "abc1234", "machine": results.machine(), "baseline": "a baseline",
            "figures": figures}


def test_every_plot_is_drawn_with_its_caption(tmp_path: Path) -> None:
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    lat = results.quantiles([float(x) for x in range(1, 1001)])
    assert len(lat) == len(results.QUANTILES) and lat[0] == 1 and lat[-1] == 1000
    (data / "ingest.json").write_text(json.dumps(_doc("ingest", {
        "rate": 1000, "fixed_rate_ms": {"bare": lat, "ingest": [x * 2 for x in lat]},
        "saturation_rps": {"bare": [4000.0], "ingest": [2000.0]},
        "p99_ms_per_round": {"bare": [5.0], "ingest": [20.0]}})))
    (data / "e2e.json").write_text(json.dumps(_doc("e2e", {
        "latency_ms": {"500/s": lat}, "recovery_s": {"consumer SIGKILL": 6.5},
        "fault_rate": 200})))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--data",
                           str(data), "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    drawn = sorted(p.name for p in out.glob("*.png"))
    assert drawn == ["e2e-latency-cdf.png", "ingest-latency-cdf.png",
                     "recovery-per-fault.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in out.glob("*.png"))
    assert "skipped ledger-throughput-processes.png" in done.stdout
