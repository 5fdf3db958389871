"""Events stuck because Connect is stopped show in `paystream health` and the metric,
and clear once Connect is back and the ledger has applied them (docs/operations.md#health)."""

from __future__ import annotations

import json
import subprocess
import time
from decimal import Decimal

import httpx

from paystream.launch import free_port, paystream_argv
from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.schema.outbox import write_event
from paystream.stack import connect
from paystream.stack.kafka import start_group_at_end
from paystream.stack.settings import StackSettings
from tests.support.ids import unique

STUCK_AFTER_S = 3


def _stuck(port: int) -> tuple[int, int, float]:
    """(stuck count from `paystream health`, its exit code, the exporter's gauge)."""
    done = subprocess.run(paystream_argv("health", "--json", "--check", "stuck_events",
                                         "--stuck-after", str(STUCK_AFTER_S)),
                          capture_output=True, text=True, timeout=60)
    [row] = json.loads(done.stdout)
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    gauge = next(float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("paystream_stuck_events "))
    return int(row["value"]), done.returncode, gauge


def _wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def test_events_stuck_while_connect_is_down_show_and_clear(db):
    settings = StackSettings.from_env()
    user, group, port = unique("stuck-user"), unique("stuck-ledger"), free_port()
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    start_group_at_end(group, PAYMENTS_TOPIC)
    ledger = subprocess.Popen(paystream_argv("consume", "ledger", "--group", group,
                                             "--metrics-port", "0"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    exporter = subprocess.Popen(paystream_argv("health", "--serve-metrics", str(port),
                                               "--stuck-after", str(STUCK_AFTER_S)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert _wait(lambda: _serving(port), 30), "the health exporter did not start"
        time.sleep(STUCK_AFTER_S + 1)  # events of earlier tests settle into the baseline
        baseline, _, baseline_gauge = _stuck(port)
        connect.stop(settings)
        try:
            event = PaymentEvent(unique("stuck"), EventType.DEPOSIT, user, "USD",
                                 Decimal("3"), "payments")
            with db.cursor() as cur:
                cur.execute("BEGIN")
                write_event(cur, event, unique("t"))
                cur.execute("COMMIT")
            time.sleep(STUCK_AFTER_S + 1)
            during, code, gauge = _stuck(port)
            assert during == baseline + 1
            assert gauge == baseline_gauge + 1
            assert code == 1  # unhealthy
        finally:
            connect.start(settings)
            connect.wait_running(settings)
        # Connect resumes from the slot; the ledger applies the event; it is no longer
        # stuck, and the count is back where it was.
        assert _wait(lambda: _status(db, event.event_id) == "applied", 60)
        after, _, gauge_after = _stuck(port)
        assert after == baseline
        assert gauge_after == baseline_gauge
    finally:
        for proc in (ledger, exporter):
            proc.terminate()
            proc.wait(timeout=30)


def _serving(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _status(db, event_id: str) -> str:
    with db.cursor() as cur:
        cur.execute("SELECT status FROM event_status WHERE event_id = %s", (event_id,))
        return cur.fetchone()[0]
