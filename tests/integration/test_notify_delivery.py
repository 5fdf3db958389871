"""The notifier against a real receiver (paystream/chaos/receiver.py checks every signature
with the `standardwebhooks` package): intents produced to a topic of the test's own as
Debezium writes them, `paystream consume notifier` recording slots, its sender (or a
`paystream notify deliver` process) sending them."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from paystream.chaos.receiver import Receiver, receiver
from paystream.notify.intents import IntentType
from paystream.notify.seal import Sealer, process_sealer
from paystream.schema.db import Connection
from tests.support.consumers import (
    ConsumerProcess,
    ProcessPool,
    create_topic,
    produce,
    read_all,
)
from tests.support.ids import unique
from tests.support.notify import (
    FAST,
    add_endpoint,
    endpoints_cli,
    intents,
    messages,
    start_sender,
)
from tests.support.waiting import wait_until

PORT = int(os.environ.get("PAYSTREAM_TEST_RECEIVER_PORT", "8280"))


@pytest.fixture
def hooks() -> Iterator[Receiver]:
    with receiver(PORT) as server:
        yield server


@pytest.fixture
def topics() -> tuple[str, str]:
    topic, dlq = unique("notify-test"), unique("notify-test-dlq")
    create_topic(topic, partitions=3)
    create_topic(dlq, partitions=1)
    return topic, dlq


def _endpoint(hooks: Receiver, made: list[str], path: str, user: str,
              events: str | None = None) -> str:
    endpoint_id, secret = add_endpoint(hooks.url(path), user, events)
    hooks.secrets[path] = secret
    made.append(endpoint_id)
    return endpoint_id


def _slots(db: Connection, endpoint_id: str) -> dict[str, tuple[str, int]]:
    with db.cursor() as cur:
        cur.execute("SELECT intent_id, state, attempts FROM notification_deliveries"
                    " WHERE endpoint_id = %s", (endpoint_id,))
        return {row[0]: (row[1], row[2]) for row in cur.fetchall()}


def _statuses(db: Connection, endpoint_id: str) -> dict[str, list[int | None]]:
    with db.cursor() as cur:
        cur.execute("SELECT intent_id, status_code FROM notification_attempts"
                    " WHERE endpoint_id = %s ORDER BY id", (endpoint_id,))
        out: dict[str, list[int | None]] = {}
        for intent_id, status in cur.fetchall():
            out.setdefault(intent_id, []).append(status)
        return out


def _notifier(pool: ProcessPool, topics: tuple[str, str], *extra: str,
              env: dict[str, str] | None = None) -> ConsumerProcess:
    topic, dlq = topics
    return pool.start("notifier", topic=topic, group=unique("notifier-test"), dlq_topic=dlq,
                      extra_args=extra, env={**FAST, **(env or {})})


def test_deliveries_are_signed_filtered_and_named_by_their_intent(
        db: Connection, pool: ProcessPool, hooks: Receiver, topics: tuple[str, str],
        endpoints: list[str]) -> None:
    user, other = unique("ntf-user"), unique("ntf-other")
    every = _endpoint(hooks, endpoints, f"/ok/{user}", user)
    only_withdrawals = _endpoint(hooks, endpoints, f"/ok/{user}-w", user, "withdrawal.*")
    kinds = (IntentType.DEPOSIT_CREDITED, IntentType.WITHDRAWAL_REJECTED)
    mine = intents(unique("src"), user, 30, kinds)
    theirs = intents(unique("src"), other, 5)
    proc = _notifier(pool, topics)
    produce(topics[0], messages(mine + theirs))

    wait_until(lambda: len(set(hooks.ids(f"/ok/{user}"))) >= 30, 60,
               "30 deliveries to the endpoint of every type", interval_s=0.5)
    wait_until(lambda: len(set(hooks.ids(f"/ok/{user}-w"))) >= 15, 30,
               "15 withdrawal deliveries", interval_s=0.5)
    assert not hooks.bad, hooks.bad[:3]
    # webhook-id is the intent id, the body is the intent's wire form.
    expected = {i.id: i.body() for i in mine}
    got = dict(zip(hooks.ids(f"/ok/{user}"), hooks.bodies(f"/ok/{user}"), strict=True))
    assert got == expected
    assert all(body["id"] == webhook_id for webhook_id, body in got.items())
    withdrawals = {i.id for i in mine if i.type is IntentType.WITHDRAWAL_REJECTED}
    assert set(hooks.ids(f"/ok/{user}-w")) == withdrawals  # the filter, and no other user's
    assert {s for s, _ in _slots(db, every).values()} == {"delivered"}
    assert set(_slots(db, only_withdrawals)) == withdrawals
    assert all(codes == [200] for codes in _statuses(db, every).values())
    assert proc.terminate() == 0, proc.tail()


def test_500_then_200_is_retried_under_the_same_id_and_a_400_is_not(
        db: Connection, pool: ProcessPool, hooks: Receiver, topics: tuple[str, str],
        endpoints: list[str]) -> None:
    user = unique("ntf-user")
    flaky = _endpoint(hooks, endpoints, f"/flaky/2/{user}", user)
    refusing = _endpoint(hooks, endpoints, f"/refuse/{user}", user)
    batch = intents(unique("src"), user, 10)
    proc = _notifier(pool, topics)
    produce(topics[0], messages(batch))

    wait_until(lambda: {s for s, _ in _slots(db, flaky).values()} == {"delivered"}
               and len(_slots(db, flaky)) == 10, 60, "the flaky endpoint's deliveries",
               interval_s=0.5)
    wait_until(lambda: len(_slots(db, refusing)) == 10
               and {s for s, _ in _slots(db, refusing).values()} == {"failed"}, 30,
               "the refusing endpoint's slots failed", interval_s=0.5)
    assert not hooks.bad, hooks.bad[:3]
    # Three tries each (500, 500, 200), every one under the intent's id.
    assert Counter(hooks.ids(f"/flaky/2/{user}")) == {i.id: 3 for i in batch}
    assert _statuses(db, flaky) == {i.id: [500, 500, 200] for i in batch}
    # A 400 ends the retries at once.
    assert Counter(hooks.ids(f"/refuse/{user}")) == {i.id: 1 for i in batch}
    assert _statuses(db, refusing) == {i.id: [400] for i in batch}
    assert proc.terminate() == 0, proc.tail()


def test_a_hanging_endpoint_does_not_stall_another(
        db: Connection, pool: ProcessPool, hooks: Receiver, topics: tuple[str, str],
        endpoints: list[str]) -> None:
    user = unique("ntf-user")
    hanging = _endpoint(hooks, endpoints, f"/hang/{user}", user)
    _endpoint(hooks, endpoints, f"/ok/{user}", user)
    batch = intents(unique("src"), user, 40)
    # The hanging endpoint's attempts last 30 s each; 4 of them in flight at most.
    proc = _notifier(pool, topics, env={"PAYSTREAM_NOTIFY_TIMEOUT_S": "30",
                                        "PAYSTREAM_NOTIFY_LEASE_S": "60"})
    produce(topics[0], messages(batch))
    wait_until(lambda: len(set(hooks.ids(f"/ok/{user}"))) == 40, 20,
               "every delivery to the healthy endpoint while the other hangs",
               interval_s=0.2)
    # The hanging one holds exactly its own capacity, and has answered none.
    assert len(set(hooks.ids(f"/hang/{user}"))) == 4
    assert _statuses(db, hanging) == {}
    proc.kill()


def test_an_endpoint_failing_too_long_is_disabled(
        db: Connection, pool: ProcessPool, hooks: Receiver, topics: tuple[str, str],
        endpoints: list[str]) -> None:
    user = unique("ntf-user")
    failing = _endpoint(hooks, endpoints, f"/fail/{user}", user)
    proc = _notifier(pool, topics, env={"PAYSTREAM_NOTIFY_DISABLE_AFTER_S": "1.5",
                                        "PAYSTREAM_NOTIFY_RETRY_DELAYS_S": "0.5," * 20})
    produce(topics[0], messages(intents(unique("src"), user, 3)))

    def disabled() -> bool:
        with db.cursor() as cur:
            cur.execute("SELECT disabled_at IS NOT NULL FROM notification_endpoints"
                        " WHERE endpoint_id = %s", (failing,))
            return bool(cur.fetchone()[0])

    wait_until(disabled, 30, "the failing endpoint disabled", interval_s=0.5)
    wait_until(lambda: proc.events("endpoint_disabled"), 10, "the endpoint_disabled line")
    assert proc.events("endpoint_disabled")[0]["endpoint_id"] == failing
    listed = endpoints_cli("list").stdout
    assert failing in listed and "disabled: failing since" in listed
    # Disabled: no more attempts.
    seen = len(hooks.ids(f"/fail/{user}"))
    time.sleep(1.5)
    assert len(hooks.ids(f"/fail/{user}")) == seen
    assert proc.terminate() == 0, proc.tail()


@pytest.mark.parametrize("window", ["after_claim", "after_send"])
def test_a_sender_killed_mid_delivery_loses_nothing_and_never_renames(
        db: Connection, pool: ProcessPool, hooks: Receiver, topics: tuple[str, str],
        endpoints: list[str], tmp_path, window: str) -> None:
    user = unique("ntf-user")
    endpoint = _endpoint(hooks, endpoints, f"/ok/{user}", user)
    batch = intents(unique("src"), user, 60)
    # The consumer only records; senders are processes of their own.
    recorder = _notifier(pool, topics, "--no-deliver")
    produce(topics[0], messages(batch))
    wait_until(lambda: len(_slots(db, endpoint)) == 60, 60, "60 slots recorded",
               interval_s=0.5)
    assert hooks.ids(f"/ok/{user}") == []  # recorded, nothing sent

    crash = {"after_claim": "PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_CLAIM",
             "after_send": "PAYSTREAM_TEST_NOTIFY_CRASH_AFTER_SEND"}[window]
    first = start_sender(tmp_path, {**FAST, crash: "10"})
    assert first.wait(60) == -9, first.tail()  # SIGKILLed in the window
    sent_before = Counter(hooks.ids(f"/ok/{user}"))
    stuck = [i for i, (state, _) in _slots(db, endpoint).items() if state == "pending"]
    assert stuck  # the dead sender's claims are left behind, leased
    second = start_sender(tmp_path, FAST)
    wait_until(lambda: {s for s, _ in _slots(db, endpoint).values()} == {"delivered"}, 60,
               "every slot delivered after the restart", interval_s=0.5)
    assert second.terminate() == 0, second.tail()
    assert recorder.terminate() == 0, recorder.tail()

    assert not hooks.bad, hooks.bad[:3]
    seen = Counter(hooks.ids(f"/ok/{user}"))
    assert set(seen) == {i.id for i in batch}  # every intent, under its own id only
    duplicates = {i: n for i, n in seen.items() if n > 1}
    # A duplicate is only ever an attempt the dead sender made, sent again under the
    # same webhook-id (answered, but its answer not recorded).
    assert set(duplicates) <= set(sent_before)
    assert all(n <= 2 for n in seen.values())
    if window == "after_send":
        assert duplicates  # the 10th answer was not recorded: it was sent again
    else:
        # Claimed and never sent when it died: sent first by the second sender.
        assert [i for i in stuck if i not in sent_before]


def test_what_is_not_an_intent_or_not_sealed_by_us_is_a_dead_letter_and_never_sent(
        db: Connection, pool: ProcessPool, hooks: Receiver, topics: tuple[str, str],
        endpoints: list[str]) -> None:
    user = unique("ntf-user")
    _endpoint(hooks, endpoints, f"/ok/{user}", user)
    good, wrong_id, mixed_good, forged, altered, foreign = intents(unique("src"), user, 6)
    sealer = process_sealer()
    # Sealed by us, one element with an id its source does not derive: judged alone.
    mixed = [{**mixed_good.body(), "trace_id": "t"},
             {**wrong_id.body(), "id": "ntf_" + "f" * 32}]
    # Well formed, the id its source derives, a made-up amount: only the seal tells.
    forged_body = {**forged.body(), "data": {**forged.data, "amount": "1000000"}}
    [(key, value, headers)] = messages([altered])
    altered_record = json.loads(value)
    altered_record["intents"][0]["data"]["amount"] = "1000000"  # changed after the seal
    bad = [(key, json.dumps({"intents": mixed, "seal": sealer.seal(mixed)}).encode(), headers),
           (user.encode(), json.dumps({"intents": [forged_body]}).encode(), []),
           (key, json.dumps(altered_record).encode(), headers),
           *messages([foreign], Sealer((b"a key that is not the stack's",))),
           (user.encode(), json.dumps(good.body()).encode(), []),  # an intent, not a record
           (user.encode(), b"not json", [])]
    proc = _notifier(pool, topics)
    produce(topics[0], messages([good]) + bad)
    wanted = sorted([good.id, mixed_good.id])
    wait_until(lambda: sorted(hooks.ids(f"/ok/{user}")) == wanted, 30,
               "the two real intents", interval_s=0.5)
    wait_until(lambda: len(read_all(topics[1])) == 6, 30, "six dead letters", interval_s=0.5)
    reasons = sorted(dict(m.headers())["dlq.error.reason"].decode()
                     for m in read_all(topics[1]))
    assert reasons == ["bad_seal", "bad_seal", "malformed", "malformed", "unsealed",
                       "wrong_intent_id"]
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM notification_intents WHERE intent_id = ANY(%s)",
                    ([wrong_id.id, forged.id, altered.id, foreign.id, "ntf_" + "f" * 32],))
        assert cur.fetchone()[0] == 0
    assert proc.terminate() == 0, proc.tail()
    assert sorted(hooks.ids(f"/ok/{user}")) == wanted
