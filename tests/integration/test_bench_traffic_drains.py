"""Every benchmark leaves the stack it ran on usable: its traffic, made by the bench's
own functions in miniature, is applied by the `ledger` consumer started as `paystream
run` starts it (the default group, topic and DLQ limit), each event ends with a final
outcome other than unknown_user, and the group's lag on paystream.payments (the whole
topic, whatever other tests left there) returns to 0.

A bench that sent deposits for users it never created once left the `make run` ledger
restarting for ever on a batch it could not commit; this is the check that no bench does
that again."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from paystream.consumers.ledger.reconcile import find_mismatches
from paystream.launch import free_port, paystream_argv
from paystream.run import services
from paystream.schema.db import Connection
from paystream.schema.events import PAYMENTS_TOPIC
from paystream.stack.settings import StackSettings
from tests.support.chain.pipeline import Pipeline, persisted_anvil
from tests.support.consumers import ConsumerProcess, drained
from tests.support.ingest import PAYMENTS_SECRET_BYTES, ingest_server
from tests.support.waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import api_bench
import cdc_latency
import e2e_latency
import finality_e2e_bench
import ingest_bench
import per_event_ledger

from bench import ledger_bench

DEADLINE_S = 60.0  # generous: other tests' records on the topic must drain too
LEDGER_GROUP = "ledger"  # `paystream consume ledger`'s default, the one `make run` uses


@pytest.fixture(scope="module")
def run_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsumerProcess]:
    """The ledger as `paystream run` starts it: its arguments from run.services() (only
    the metrics port made free), its environment from the stack settings."""
    [ledger] = [s for s in services(ingest_port=0) if s.name == "ledger"]
    args = list(ledger.args)
    args[args.index("--metrics-port") + 1] = "0"
    log_path = tmp_path_factory.mktemp("ledger") / "ledger.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(paystream_argv(*args), stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **StackSettings.from_env().service_env()})
    process = ConsumerProcess(proc, log_path)
    try:
        yield process
    finally:
        try:
            process.terminate()  # a clean leave: the group does not wait for a dead member
        except AssertionError:
            process.kill()


def assert_drained(db: Connection, ledger: ConsumerProcess, event_ids: list[str]) -> None:
    """Each event final (applied or rejected, never for an unknown user), then the
    `ledger` group's lag on the whole topic back to 0, the ledger still running."""
    assert event_ids
    with db.cursor() as cur:

        def final() -> bool:
            assert ledger.alive(), ledger.tail()
            cur.execute("SELECT count(*) FROM event_status WHERE event_id = ANY(%s)"
                        " AND status IN ('applied', 'rejected')", (event_ids,))
            return cur.fetchone()[0] == len(event_ids)

        try:
            wait_until(final, DEADLINE_S, "every bench event final")
        except AssertionError:
            cur.execute("SELECT event_id, status FROM event_status WHERE event_id = ANY(%s)"
                        " AND status NOT IN ('applied', 'rejected')", (event_ids,))
            raise AssertionError(f"not final: {cur.fetchall()[:5]}\n{ledger.tail()}") from None
        cur.execute("SELECT event_id, outcome FROM processed_events WHERE event_id = ANY(%s)"
                    " AND outcome = 'unknown_user'", (event_ids,))
        assert cur.fetchall() == [], "the bench sent events for users it did not create"
    wait_until(lambda: ledger.alive() and drained(LEDGER_GROUP, PAYMENTS_TOPIC), DEADLINE_S,
               f"the {LEDGER_GROUP} group's lag on {PAYMENTS_TOPIC} back to 0")


def test_cdc_latency_deposits_are_for_users_it_created(db, run_ledger) -> None:
    run_id = uuid.uuid4().hex[:8]
    committed: dict[str, float] = {}
    cdc_latency.write_events(run_id, cdc_latency.bench_users(run_id), 4, 0.0, committed)
    assert_drained(db, run_ledger, list(committed))


def test_e2e_latency_webhooks_drain(db, run_ledger) -> None:
    run_id = uuid.uuid4().hex[:6]
    users = e2e_latency.create_users(run_id, 3)
    answers: queue.Queue[tuple[str, float]] = queue.Queue()
    with ingest_server() as ingest:
        url = ingest.url + "/webhooks/payments"
        # One at a time: each webhook waits for its own application by `ledger`.
        _latencies, lost = e2e_latency.one_at_a_time(url, PAYMENTS_SECRET_BYTES, users[0],
                                                     f"e2e-{run_id}-single", 2, DEADLINE_S)
        assert lost == 0, run_ledger.tail()
        # At a rate, round the users, as each sender process of the bench does (here in
        # this process: it only put()s its answers, which a thread's queue takes too).
        e2e_latency.sender(url, PAYMENTS_SECRET_BYTES, users, f"e2e-{run_id}-r", 20.0, 0.3,
                           answers)
    sent = [answers.get_nowait()[0] for _ in range(answers.qsize())]
    assert len(sent) >= 3
    assert_drained(db, run_ledger, [f"e2e-{run_id}-single-{n}" for n in range(2)] + sent)


def test_ingest_bench_webhooks_drain(db, run_ledger) -> None:
    requests = ingest_bench.signed_requests(5, "drain")
    event_ids = []
    with ingest_server() as ingest, httpx.Client(timeout=10) as client:
        for body, headers in requests:
            answer = client.post(ingest.url + ingest_bench.PATH, content=body, headers=headers)
            assert answer.status_code == 200, answer.text
            event_ids.append(json.loads(body)["event_id"])
    assert_drained(db, run_ledger, event_ids)


def test_ledger_bench_events_stay_off_the_payments_topic(db, run_ledger) -> None:
    """Its events are recorded without an outbox row (the bench preloads topics of its
    own); the baseline's are applied by its per-event applier. Either way all final,
    nothing for `ledger` to choke on."""
    run = f"drain-{uuid.uuid4().hex[:8]}"
    _topic, messages = ledger_bench.prepare(run, 3, 12, 44, with_topic=False)
    per_event_ledger.run([value for _key, value, _headers in messages if value], 1)
    assert sum(ledger_bench.outcomes_of(run).values()) == len(messages)
    assert_drained(db, run_ledger, [f"{run}-e{i}" for i in range(len(messages))])


def test_api_bench_user_reconciles(db, run_ledger) -> None:
    """The API bench's user holds balances the ledger put there: `paystream reconcile`
    finds them equal to their postings."""
    user = api_bench.seed_user()
    with db.cursor() as cur:
        checked, mismatches = find_mismatches(cur, users=[user])
        assert (checked, mismatches) == (len(api_bench.ASSETS), [])
        cur.execute("SELECT count(*) FROM balances WHERE user_id = %s AND balance > 0",
                    (user,))
        assert cur.fetchone()[0] == len(api_bench.ASSETS)
    assert_drained(db, run_ledger, [f"{user}-{asset}" for asset in api_bench.ASSETS])


def test_finality_e2e_deposit_drains(db, run_ledger) -> None:
    """A chain deposit as the finality bench makes it (its user and deposit address
    created, a real transaction on an anvil of its own, the Alchemy delivery, the
    watcher's settlement): both records applied, by the bench's group and by `ledger`."""
    with persisted_anvil(free_port(), slots_in_an_epoch=1) as chain, \
            Pipeline(chain, tick_seconds=0.5) as pipe:
        user, *_seconds = finality_e2e_bench.one_deposit(chain, pipe, 0, 0.5)
    with db.cursor() as cur:
        cur.execute("SELECT event_id FROM chain_deposits WHERE user_id = %s", (user,))
        [(event_id,)] = cur.fetchall()
        # The settlement is the watcher's, through the outbox (no payment_events row).
        cur.execute("SELECT outcome FROM processed_events WHERE event_id = %s",
                    (f"{event_id}:finalized",))
        assert cur.fetchall() == [("applied",)]
    assert_drained(db, run_ledger, [event_id])
