"""The ingest benchmark's wrk driver against a real uvicorn server: what it reports
(answers, errors, how often it ran out of distinct requests) is what happened.
wrk is installed by `paystream stack up` (make test runs it first)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.ingest import ingest_server, payment_body, payment_headers

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from wrk_load import run_wrk

BARE_APP = "bench.ingest_baseline:create_bare_app"


def _requests(count: int) -> list[tuple[bytes, dict[str, str]]]:
    return [(body, payment_headers(body))
            for body in (payment_body(f"wrk-{n}", "wrk-user") for n in range(count))]


def test_wrk_reports_answers_and_replays_of_a_short_list() -> None:
    with ingest_server(app=BARE_APP) as bare:
        done = run_wrk(bare.url + "/webhooks/payments", _requests(25), connections=2,
                       duration_s=1)
    assert done.answered > 100  # a bare endpoint answers thousands a second
    assert done.ok == done.answered and done.errors == 0
    # The list ran out and started over once per 25 requests sent.
    assert done.wraps >= done.answered // 25 - 1
    assert 0 < done.p50_ms <= done.p99_ms


def test_wrk_counts_refusals_as_errors() -> None:
    with ingest_server(app=BARE_APP) as bare:  # GET-only path: every POST is a 405
        done = run_wrk(bare.url + "/healthz", _requests(10), connections=1, duration_s=1)
    assert done.answered > 0
    assert done.ok == 0 and done.errors >= done.answered
