"""Every panel of the Grafana dashboard (ops/grafana/paystream.json) against the live
Prometheus while the pipeline carries traffic: signed webhooks through the ingest,
Debezium and the ledger group, dead letters, the finality watcher on anvil, the health
exporter. A query Prometheus refuses fails at once; one that returns nothing (or only
NaN) by the deadline fails with its panel's title."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.dashboard import Query, queries
from tests.support.ingest import ingest_server, payment_body, payment_headers
from tests.support.observed import Observed
from tests.support.prometheus import LivePrometheus

DEADLINE_S = 90


class Webhooks:
    """Signed deposits POSTed to the ingest at `per_second` until stopped."""

    def __init__(self, url: str, user: str, per_second: float) -> None:
        self.url, self.user, self.per_second = url, user, per_second
        self.answers: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Webhooks:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        n = 0
        with httpx.Client(timeout=10) as client:
            while not self._stop.wait(1 / self.per_second):
                n += 1
                body = payment_body(f"{self.user}-dash-{n}", self.user, "2.5")
                status = client.post(f"{self.url}/webhooks/payments", content=body,
                                     headers=payment_headers(body)).status_code
                self.answers[status] = self.answers.get(status, 0) + 1


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    live = LivePrometheus.of_this_stack()
    obs = Observed(live, tmp_path_factory.mktemp("dashboard"))
    obs.setup(also_payments=True)
    try:
        obs.start_ledger()
        obs.start_health()
        obs.start_finality()
        yield obs
    finally:
        obs.stop_all()


def _has_data(live: LivePrometheus, query: Query) -> bool:
    result = live.query(query.expr)  # AssertionError at once if Prometheus refuses it
    return any(not math.isnan(float(r["value"][1])) for r in result)


def test_every_panel_returns_data_from_the_live_pipeline(pipeline: Observed) -> None:
    live = pipeline.live
    admin_port = live.target_port("ingest")
    with ingest_server({"PAYSTREAM_INGEST_ADMIN_PORT": str(admin_port)}) as ingest:
        live.wait_scraped("ingest")
        # One refusal (a bad signature) for the refusals panel.
        body = payment_body(f"{pipeline.user}-forged", pipeline.user)
        bad = httpx.post(f"{ingest.url}/webhooks/payments", content=body,
                         headers={**payment_headers(body), "webhook-signature": "v1,AAAA"})
        assert bad.status_code == 401, bad.text
        with Webhooks(ingest.url, pipeline.user, per_second=10) as hooks:
            pipeline.events(20)                  # straight onto the test's topic
            pipeline.events(3, stored=False)     # dead letters (unknown_event)
            missing = queries()
            deadline = time.monotonic() + DEADLINE_S
            while missing and time.monotonic() < deadline:
                missing = [q for q in missing if not _has_data(live, q)]
                time.sleep(1)
            took = DEADLINE_S - (deadline - time.monotonic())
        assert hooks.answers.get(200, 0) > 0, hooks.answers
    print(f"{len(queries())} queries answered with data after {took:.0f} s; "
          f"webhooks {hooks.answers}")
    assert not missing, "panels with no data from the live pipeline:\n" + "\n".join(
        map(str, missing)) + "\n--- ledger log ---\n" + pipeline.log_tail("ledger")
