"""The outbox's failover fence (docs/operations.md#cdc-across-a-failover), on the real
stack: while the failover follower holds it, every other outbox writer is refused with
a retryable error (the ingest answers 503, the ledger retries its batch) instead of
committing a message the new slot would decode ahead of the republished ones; once it
is lifted, everything refused goes through, once."""

from __future__ import annotations

import os
import signal
import time
from decimal import Decimal

import httpx

from paystream.schema.db import connect, database_url
from paystream.schema.events import PAYMENTS_TOPIC
from paystream.schema.outbox import fence
from paystream.stack.kafka import start_group_at_end
from tests.support.consumers import create_topic, end_offsets
from tests.support.ids import unique
from tests.support.ingest import ingest_server, known_user, payment_body, payment_headers
from tests.support.waiting import wait_for

FENCED_S = 3.0  # how long the fence is held while the ledger has a record to apply


def _post(url: str, event_id: str, user: str, amount: str) -> httpx.Response:
    body = payment_body(event_id, user, amount)
    return httpx.post(f"{url}/webhooks/payments", content=body,
                      headers=payment_headers(body), timeout=30)


def _status(db, event_id: str) -> str | None:
    with db.cursor() as cur:
        cur.execute("SELECT status FROM event_status WHERE event_id = %s", (event_id,))
        row = cur.fetchone()
    return None if row is None else row[0]


def test_the_fence_refuses_every_outbox_writer_until_lifted_then_all_goes_through_once(
        db, pool) -> None:
    user = known_user("fence")
    group, dlq_topic = unique("fence-ledger"), unique("fence-dlq")
    create_topic(dlq_topic)
    start_group_at_end(group, PAYMENTS_TOPIC)
    ledger = pool.start("ledger", topic=PAYMENTS_TOPIC, group=group, dlq_topic=dlq_topic,
                        extra_args=["--batch-timeout", "0.05"])
    wait_for("the ledger's partitions", lambda: ledger.events("partitions_assigned"), 60)
    first, second, refused = unique("fence-a"), unique("fence-b"), unique("fence-c")
    fencer = connect(database_url("owner"), application_name="fence-test")
    try:
        with ingest_server({"PAYMENTS_ASSETS": "USD"}) as srv:
            assert _post(srv.url, first, user, "1.5").status_code == 200
            wait_for("the first deposit applied", lambda: _status(db, first) == "applied", 30)

            # A deposit on Kafka, its ledger stopped: it reaches the ledger fenced.
            os.kill(ledger.proc.pid, signal.SIGSTOP)
            before = sum(end_offsets(PAYMENTS_TOPIC).values())
            assert _post(srv.url, second, user, "2.25").status_code == 200
            wait_for("the second deposit on Kafka",
                     lambda: sum(end_offsets(PAYMENTS_TOPIC).values()) > before, 30)
            with fencer, fencer.cursor() as cur:
                fence(cur)
                answer = _post(srv.url, refused, user, "4")
                os.kill(ledger.proc.pid, signal.SIGCONT)
                time.sleep(FENCED_S)
                # Refused, not stored: the provider retries.
                assert answer.status_code == 503, answer.text
                assert answer.headers.get("retry-after"), answer.headers
                assert _status(db, refused) is None
                # The ledger's batch writes its notification intent to the outbox: it
                # is refused and tried again, the deposit not applied meanwhile.
                assert _status(db, second) == "received"
                assert ledger.alive()
            # Lifted (the transaction ended): the ledger's retry and the provider's.
            assert _post(srv.url, refused, user, "4").status_code == 200
            for event_id in (second, refused):
                wait_for(f"{event_id} applied", lambda e=event_id: _status(db, e) == "applied",
                         30)
    finally:
        fencer.close()
        os.kill(ledger.proc.pid, signal.SIGCONT)
    with db.cursor() as cur:
        cur.execute("SELECT balance FROM balances WHERE user_id = %s AND asset = 'USD'",
                    (user,))
        assert cur.fetchone()[0] == Decimal("7.75")  # each deposit once
        cur.execute("SELECT count(*) FROM user_entries WHERE user_id = %s"
                    " AND book = 'available'", (user,))
        assert cur.fetchone()[0] == 3
    retried = [e for e in ledger.log_lines() if "40001" in str(e)]
    assert retried, ledger.tail()
