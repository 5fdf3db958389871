"""Gateway events known not to apply are refused at the door (ingest/refusals.py): 422
with a code, the refusal recorded in refused_deliveries, nothing in payment_events or on
the topic; the provider's retry once the user exists is accepted."""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from paystream.ingest.payments import PaymentWrite
from paystream.ingest.recording import Recorded
from paystream.ingest.store import EventStore
from paystream.launch import paystream_argv
from paystream.schema.db import database_url
from paystream.schema.events import PAYMENTS_TOPIC, EventType, PaymentEvent
from paystream.schema.outbox import WriteOutcome
from tests.support.ids import unique
from tests.support.ingest import (
    RunningServer,
    ingest_server,
    known_user,
    payment_body,
    payment_headers,
)
from tests.support.topics import headers_of

GROUP_METRIC = re.compile(r"^paystream_ingest_commit_group_size_(count|sum) (\S+)$", re.M)
REFUSALS = re.compile(r'^paystream_ingest_refusals_total\{code="(\w+)",provider="payments"\}'
                      r" (\S+)$", re.M)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    # One writer that waits up to 300 ms for more: concurrent requests form one group.
    with ingest_server({"PAYSTREAM_INGEST_DB_WRITERS": "1",
                        "PAYSTREAM_INGEST_COMMIT_LINGER_MS": "300"}) as running:
        yield running


@pytest.fixture
def store() -> Iterator[EventStore]:
    events = EventStore(database_url("ingest"), connect_timeout_s=2,
                        statement_timeout_ms=2000, retry_after_s=7)
    yield events
    events.close()


def _post(server: RunningServer, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(server.url + "/webhooks/payments", content=body, headers=headers,
                      timeout=30)


def _refused(db, event_id: str) -> list[tuple[Any, ...]]:
    with db.cursor() as cur:
        cur.execute("SELECT code, user_id, attempts, event->>'amount', trace_id,"
                    " first_refused_at <= last_refused_at FROM refused_deliveries"
                    " WHERE provider = 'payments' AND event_id = %s", (event_id,))
        return cur.fetchall()


def _stored(db, event_id: str) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM payment_events WHERE event_id = %s", (event_id,))
        return int(cur.fetchone()[0])


def _refusal_counts(server: RunningServer) -> dict[str, float]:
    return {code: float(n) for code, n in
            REFUSALS.findall(httpx.get(server.admin_url + "/metrics").text)}


def test_unknown_user_is_refused_recorded_and_accepted_once_created(
        server: RunningServer, db, topic_reader) -> None:
    reader = topic_reader(PAYMENTS_TOPIC)
    user, event_id = unique("nobody"), unique("ev")
    body = payment_body(event_id, user, "12.5")
    headers = payment_headers(body)  # the provider's retries resend these exact bytes
    counted = _refusal_counts(server).get("unknown_user", 0.0)

    first = _post(server, body, headers)
    assert first.status_code == 422, first.text
    answer = first.json()
    assert answer["status"] == "error" and answer["code"] == "unknown_user"
    assert answer["event_id"] == event_id and user in answer["reason"]
    assert "create it first" in answer["reason"]
    assert _refused(db, event_id) == [("unknown_user", user, 1, "12.5", answer["trace_id"],
                                       True)]
    assert _stored(db, event_id) == 0

    again = _post(server, body, headers)
    assert (again.status_code, again.json()["code"]) == (422, "unknown_user")
    assert _refused(db, event_id) == [("unknown_user", user, 2, "12.5",
                                       again.json()["trace_id"], True)]
    assert _stored(db, event_id) == 0
    assert _refusal_counts(server)["unknown_user"] == counted + 2
    log = server.log_path.read_text()
    assert any("refused_deliveries" in line and again.json()["trace_id"] in line
               for line in log.splitlines())

    listed = subprocess.run(paystream_argv("refusals", "list", "--user", user),
                            check=True, capture_output=True, text=True, timeout=60).stdout
    [row] = [line.split() for line in listed.splitlines() if event_id in line]
    assert row[1:] == ["payments", "unknown_user", user, event_id, "2"]

    # The operator (or the merchant) creates the user; the provider's retry gets in.
    subprocess.run(paystream_argv("users", "add", user), check=True, capture_output=True,
                   timeout=60)
    accepted = _post(server, body, headers)
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["events"] == [{"event_id": event_id, "outcome": "accepted"}]
    assert _stored(db, event_id) == 1
    assert _refused(db, event_id)[0][2] == 2  # the record of the refusals stays

    # Messages of one user keep their order on the topic: had a refused attempt reached
    # the outbox, its message would come first, with its own trace id.
    [message] = reader.read(1, timeout=60, match=lambda m: m.key() == user.encode())
    assert headers_of(message)["event_id"] == event_id
    assert headers_of(message)["trace_id"] == accepted.json()["trace_id"]


def test_a_reference_to_another_users_event_is_refused(server: RunningServer, db) -> None:
    owner, other = known_user("owner"), known_user("other")
    deposit, refund, orphan = unique("ev-dep"), unique("ev-refund"), unique("ev-refund")
    body = payment_body(deposit, owner, "30")
    assert _post(server, body, payment_headers(body)).status_code == 200

    body = payment_body(refund, other, "30", event_type="refund", reverses=deposit)
    answer = _post(server, body, payment_headers(body))
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "reference_of_other_user"
    assert owner not in answer.json()["reason"]  # another user's id is not given away
    assert [r[:3] for r in _refused(db, refund)] == [("reference_of_other_user", other, 1)]
    assert _stored(db, refund) == 0

    # Only what is certain: a reference not stored (yet) is the ledger's to judge.
    body = payment_body(orphan, other, "30", event_type="refund",
                        reverses=unique("ev-not-yet"))
    assert _post(server, body, payment_headers(body)).status_code == 200
    # And the owner's own refund of the deposit passes the door.
    body = payment_body(unique("ev-refund"), owner, "30", event_type="refund",
                        reverses=deposit)
    assert _post(server, body, payment_headers(body)).status_code == 200


def _post_together(server: RunningServer, bodies: list[bytes]) -> list[tuple[int, str]]:
    """Post every body from its own thread, released at the same instant."""
    barrier, answers = threading.Barrier(len(bodies)), [(0, "")] * len(bodies)

    def post(n: int) -> None:
        headers = payment_headers(bodies[n])
        barrier.wait(timeout=30)
        answer = _post(server, bodies[n], headers).json()
        answers[n] = (answer.get("code") or answer["status"], answer.get("event_id", ""))

    threads = [threading.Thread(target=post, args=(n,)) for n in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return [(code, event_id) for code, event_id in answers]


def _groups(server: RunningServer) -> tuple[float, float]:
    found = dict(GROUP_METRIC.findall(httpx.get(server.admin_url + "/metrics").text))
    return float(found["count"]), float(found["sum"])


def test_concurrent_known_and_unknown_deliveries_each_get_their_answer(
        server: RunningServer, db) -> None:
    owner, other, nobody = known_user("owner"), known_user("other"), unique("nobody")
    stored = unique("ev-dep")
    body = payment_body(stored, owner, "8")
    assert _post(server, body, payment_headers(body)).status_code == 200
    commits, deliveries = _groups(server)
    ids = [unique("ev") for _ in range(4)]
    unknown = payment_body(ids[1], nobody, "2")
    answers = _post_together(server, [
        payment_body(ids[0], owner, "1"),
        unknown, unknown,  # one delivery twice in one group: two attempts, one row
        payment_body(ids[2], other, "8", event_type="chargeback", reverses=stored),
        payment_body(ids[3], other, "3")])
    assert _groups(server) == (commits + 1, deliveries + 5)  # ONE group for all five
    assert answers == [("accepted", ""), ("unknown_user", ids[1]), ("unknown_user", ids[1]),
                       ("reference_of_other_user", ids[2]), ("accepted", "")]
    assert [_stored(db, e) for e in ids] == [1, 0, 0, 1]
    assert [r[:3] for r in _refused(db, ids[1])] == [("unknown_user", nobody, 2)]
    assert [r[:3] for r in _refused(db, ids[2])] == [("reference_of_other_user", other, 1)]


def _deposit(event_id: str, user: str, event_type: EventType = EventType.DEPOSIT,
             reference: str | None = None) -> PaymentEvent:
    return PaymentEvent(event_id=event_id, event_type=event_type, user_id=user,
                        asset="USD", amount=Decimal(4), provider="payments",
                        reference=reference)


def _summary(outcome: Any) -> Any:
    assert isinstance(outcome, Recorded), outcome
    if outcome.refused is not None:
        return outcome.refused.code
    return [o for _, o in outcome.events]


def test_grouped_and_one_by_one_refuse_alike(store: EventStore, db) -> None:
    # An event of the group that names one stored earlier in the same group: written
    # one by one it would see that event's owner, so written together it must too.
    owner, other, nobody = known_user("owner"), known_user("other"), unique("nobody")

    def group() -> list[PaymentWrite]:
        first, unknown = unique("ev"), unique("ev")
        return [PaymentWrite(_deposit(first, owner), "t1"),
                PaymentWrite(_deposit(unique("ev"), other, EventType.REFUND, first), "t2"),
                PaymentWrite(_deposit(unknown, nobody), "t3"),
                PaymentWrite(_deposit(unknown, nobody), "t4"),
                PaymentWrite(_deposit(unique("ev"), owner, EventType.REFUND, first), "t5")]

    expected = [[WriteOutcome.ACCEPTED], "reference_of_other_user", "unknown_user",
                "unknown_user", [WriteOutcome.ACCEPTED]]
    together = group()
    assert [_summary(o) for o in store.commit_group(together)] == expected
    alone = group()
    assert [_summary(store.run(w)) for w in alone] == expected
    for writes in (together, alone):
        assert _refused(db, writes[2].event.event_id)[0][2] == 2
