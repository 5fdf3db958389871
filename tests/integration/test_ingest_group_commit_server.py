"""Group commit in a real uvicorn server: one transaction for concurrent deliveries,
and no answer before the COMMIT, checked by killing the server (SIGKILL) under load."""

from __future__ import annotations

import re
import threading
import time
from decimal import Decimal

import httpx

from tests.support.ids import unique
from tests.support.ingest import (
    RunningServer,
    create_users,
    ingest_server,
    known_user,
    payment_body,
    payment_headers,
)

GROUP_METRIC = re.compile(r"^paystream_ingest_commit_group_size_(count|sum) (\S+)$", re.M)


def _groups(server: RunningServer) -> tuple[float, float]:
    """(commits, deliveries committed) so far, from /metrics."""
    found = dict(GROUP_METRIC.findall(httpx.get(server.admin_url + "/metrics").text))
    return float(found["count"]), float(found["sum"])


def _post_together(url: str, bodies: list[bytes]) -> list[tuple[int, str]]:
    """Post every body from its own thread, released at the same instant."""
    barrier, answers = threading.Barrier(len(bodies)), [(0, "")] * len(bodies)

    def post(n: int) -> None:
        headers = payment_headers(bodies[n])
        barrier.wait(timeout=30)
        answer = httpx.post(url, content=bodies[n], headers=headers, timeout=30)
        answers[n] = (answer.status_code, answer.json()["status"])

    threads = [threading.Thread(target=post, args=(n,)) for n in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return answers


def test_concurrent_deliveries_share_one_commit_and_keep_their_own_answers(db) -> None:
    # One writer that waits up to 500 ms for more: the five requests form one group.
    env = {"PAYSTREAM_INGEST_DB_WRITERS": "1",
           "PAYSTREAM_INGEST_COMMIT_LINGER_MS": "500"}
    user, known, twice = known_user(), unique("ev"), unique("ev")
    good_a, good_b = unique("ev"), unique("ev")
    with ingest_server(env) as server:
        url = server.url + "/webhooks/payments"
        body = payment_body(known, user, "5")
        assert httpx.post(url, content=body, headers=payment_headers(body)).status_code == 200
        commits, deliveries = _groups(server)
        identical = payment_body(twice, user, "3")
        answers = _post_together(url, [payment_body(good_a, user, "1"),
                                       payment_body(known, user, "500"),  # conflict
                                       identical, identical,
                                       payment_body(good_b, user, "2")])
        assert _groups(server) == (commits + 1, deliveries + 5)  # ONE commit for all five
    assert answers[0] == answers[4] == (200, "accepted")
    assert answers[1] == (409, "error")
    assert sorted(answers[2:4]) == [(200, "accepted"), (200, "duplicate")]
    with db.cursor() as cur:
        cur.execute("SELECT event_id, amount FROM payment_events WHERE user_id = %s", (user,))
        assert dict(cur.fetchall()) == {known: Decimal(5), good_a: Decimal(1),
                                        good_b: Decimal(2), twice: Decimal(3)}


def test_sigkill_under_load_loses_no_answered_delivery(db) -> None:
    """Every delivery answered 2xx before a SIGKILL is in payment_events afterwards."""
    env = {"PAYSTREAM_INGEST_COMMIT_LINGER_MS": "2"}
    run = unique("kill")
    create_users(f"{run}-user-{t}" for t in range(16))
    answered: list[str] = []
    refused: list[str] = []
    stop = threading.Event()

    def load(thread_no: int, url: str) -> None:
        with httpx.Client(timeout=10) as client:
            for n in range(100_000):
                if stop.is_set():
                    return
                event_id = f"{run}-{thread_no}-{n}"
                body = payment_body(event_id, f"{run}-user-{thread_no}", "1")
                try:
                    answer = client.post(url, content=body, headers=payment_headers(body))
                except httpx.HTTPError:
                    refused.append(event_id)  # the server died with it in flight
                    return
                if 200 <= answer.status_code < 300:
                    answered.append(event_id)

    with ingest_server(env) as server:
        threads = [threading.Thread(target=load, args=(t, server.url + "/webhooks/payments"))
                   for t in range(16)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(answered) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        commits, deliveries = _groups(server)
        server.process.kill()  # SIGKILL: no shutdown, no flush, mid-group
        server.process.wait(timeout=10)
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert len(answered) >= 300, "the load did not get going"
    assert refused, "the kill did not hit requests in flight"
    assert deliveries > commits, "no two deliveries ever shared a commit"
    with db.cursor() as cur:
        cur.execute("SELECT event_id FROM payment_events WHERE event_id = ANY(%s)",
                    (answered,))
        written = {row[0] for row in cur.fetchall()}
    assert sorted(set(answered) - written) == []  # nothing acknowledged was lost
