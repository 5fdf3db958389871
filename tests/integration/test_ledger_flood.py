"""One provider's bad traffic cannot stop the ledger; a bad deploy stops the group once,
durably, and a resume makes progress (docs/guarantees.md, "Final outcomes and dead
letters", "The DLQ limit").

The records are produced before the ledger starts, as behind a paused ledger: the whole
flood is waiting when it comes back."""

from __future__ import annotations

import subprocess
import time
from decimal import Decimal

import httpx

from paystream.consumers.dead_letters import send as dlq
from paystream.launch import free_port, paystream_argv
from paystream.ops.health import HealthChecker, HealthCollector, HealthSettings
from paystream.schema.events import EventType, PaymentEvent
from tests.support.consumers import (
    committed,
    create_topic,
    create_users,
    drained,
    produce,
    read_all,
    store_events,
    wait_until,
    wire_message,
)
from tests.support.ids import unique

GHOSTS = 1_500  # deposits of users that do not exist, stored as the old ingest did
FORGED = 300  # records the outbox never sent: half with no row, half another content
HONEST = 60  # another provider's deposits for a user that exists


def _one(db, sql: str, *params):
    with db.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchone()


def _gauge(port: int, name: str, group: str) -> float | None:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith(f'{name}{{group="{group}"}}'):
            return float(line.split()[-1])
    return None


def test_a_flood_of_unknown_users_and_forged_records_never_stops_the_ledger(db, pool):
    topic, dlq_topic = unique("flood-topic"), unique("flood-dlq")
    group, mirror_group = unique("flood-ledger"), unique("flood-mirror")
    create_topic(topic)
    create_topic(dlq_topic)
    user, ghost = unique("flood-user"), unique("flood-ghost")
    with db.cursor() as cur:
        create_users(cur, [user])

    def deposit(n: str, who: str, provider: str, amount: str = "1") -> PaymentEvent:
        return PaymentEvent(f"{group}-{n}", EventType.DEPOSIT, who, "USDC", Decimal(amount),
                            provider)

    # One provider's flood: ghosts (users spread over partitions) and forged records.
    ghosts = [deposit(f"g{i}", f"{ghost}-{i % 40}", "flood-gw") for i in range(GHOSTS)]
    unstored = [deposit(f"f{i}", f"{ghost}-{i % 40}", "flood-gw") for i in range(FORGED // 2)]
    altered = [deposit(f"a{i}", user, "flood-gw") for i in range(FORGED // 2)]
    honest = [deposit(f"h{i}", user, "calm-gw", f"{i + 1}.5") for i in range(HONEST)]
    with db.cursor() as cur:
        store_events(cur, [*ghosts, *honest])
        # Stored with 1, sent with 1000: not what the outbox would have sent.
        store_events(cur, altered)
    forged_wires = ([wire_message(e) for e in unstored]
                    + [wire_message(PaymentEvent(e.event_id, e.event_type, e.user_id, e.asset,
                                                 Decimal(1000), e.provider))
                       for e in altered])
    bad = [wire_message(e) for e in ghosts] + forged_wires
    step = len(bad) // HONEST
    mixed = []
    for i, event in enumerate(honest):  # interleaved: an honest deposit every ~30 bad
        mixed += [*bad[i * step:(i + 1) * step], wire_message(event)]
    mixed += bad[HONEST * step:]
    produce(topic, mixed)

    started = time.monotonic()
    ledger = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq_topic)
    mirror = pool.start("dlq-mirror", topic=dlq_topic, group=mirror_group,
                        dlq_topic=dlq_topic + ".x")
    total = sum((e.amount for e in honest), Decimal(0))
    try:
        wait_until(lambda: _one(db, "SELECT balance FROM balances WHERE user_id = %s",
                                user) == (total,), 30, "the honest deposits applied")
        applied_after_s = time.monotonic() - started
        # Generous: each batch holding a record with no stored row pays the ledger's
        # visibility rechecks (~2 s), and batches are smaller on a loaded machine.
        wait_until(lambda: drained(group, topic), 60, "the ledger through the flood")
        wait_until(lambda: drained(mirror_group, dlq_topic), 60, "the mirror through the DLQ")
    except AssertionError:
        raise AssertionError(pool.logs(40)) from None
    assert applied_after_s < 30
    print(f"flood: {HONEST} ordinary deposits applied {applied_after_s:.1f} s after the start,"
          f" behind {GHOSTS} unknown users and {FORGED} forged records")
    assert _one(db, "SELECT count(*) FROM event_status WHERE event_id = ANY(%s)"
                    " AND status = 'applied'", [e.event_id for e in honest]) == (HONEST,)

    # Every ghost: rejected, once, with its outcome; no balance row, nothing moved.
    ghost_ids = [e.event_id for e in ghosts]
    assert _one(db, "SELECT count(*) FROM event_status WHERE event_id = ANY(%s)"
                    " AND status = 'rejected'", ghost_ids) == (GHOSTS,)
    assert _one(db, "SELECT count(*), min(outcome), max(outcome) FROM processed_events"
                    " WHERE event_id = ANY(%s)", ghost_ids) == (GHOSTS, "unknown_user",
                                                                "unknown_user")
    assert _one(db, "SELECT count(*) FROM balances WHERE user_id LIKE %s",
                f"{ghost}-%") == (0,)
    assert _one(db, "SELECT count(*) FROM user_entries WHERE source_event_id = ANY(%s)",
                ghost_ids) == (0,)

    # Every forged record: in the DLQ topic and table with its reason, and nothing else.
    forged_ids = {e.event_id for e in [*unstored, *altered]}
    letters = read_all(dlq_topic)
    reasons: dict[str, str] = {}
    for message in letters:
        headers = {k: v.decode() for k, v in message.headers()}
        assert headers[dlq.H_KIND] == "judged"
        reasons[headers["event_id"]] = headers[dlq.H_REASON]
    assert len(letters) == FORGED and set(reasons) == forged_ids
    assert {reasons[e.event_id] for e in unstored} == {"unknown_event"}
    assert {reasons[e.event_id] for e in altered} == {"content_mismatch"}
    with db.cursor() as cur:
        cur.execute("SELECT error_reason, count(*) FROM dead_letter_queue"
                    " WHERE source_topic = %s GROUP BY 1 ORDER BY 1", (topic,))
        assert cur.fetchall() == [("content_mismatch", FORGED // 2),
                                  ("unknown_event", FORGED // 2)]
    # The altered events' own rows are untouched: the forged copy is no redelivery.
    assert _one(db, "SELECT count(*) FROM event_status WHERE event_id = ANY(%s)"
                    " AND status = 'received'", [e.event_id for e in altered]) == (FORGED // 2,)

    # Nothing lost: every record was applied, rejected or dead-lettered, and no more.
    outcomes = {}
    for line in ledger.events("batch_committed"):
        for outcome, n in line["outcomes"].items():
            outcomes[outcome] = outcomes.get(outcome, 0) + n
    assert {k: n for k, n in outcomes.items() if n} == {"applied": HONEST,
                                                        "unknown_user": GHOSTS}, outcomes
    # Each dead letter's log line names the provider the record claims.
    assert {line["provider"] for line in ledger.events("dead_lettered")} == {"flood-gw"}
    assert len(ledger.events("dead_lettered")) == FORGED
    assert ledger.alive() and not ledger.events("consumer_group_stopped"), ledger.tail()

    # A redelivered rejection is a duplicate: claimed once, nothing written again.
    before = len(ledger.events("batch_committed"))
    produce(topic, [wire_message(e) for e in ghosts[:10]])
    wait_until(lambda: drained(group, topic), 30, "the redeliveries")
    again = ledger.events("batch_committed")[before:]
    assert sum(line["outcomes"].get("duplicate", 0) for line in again) == 10
    assert not any(line["outcomes"].get("unknown_user") for line in again)
    assert ledger.terminate() == 0 and mirror.terminate() == 0


def test_unexpected_failures_past_the_limit_stop_the_group_once_until_resumed(db, pool):
    topic, dlq_topic, group = unique("stop-topic"), unique("stop-dlq"), unique("stop-ledger")
    create_topic(topic, partitions=1)
    create_topic(dlq_topic)
    rich, calm = unique("stop-rich"), unique("stop-calm")
    with db.cursor() as cur:
        create_users(cur, [rich, calm])

    def deposit(n: str, who: str, amount: str) -> PaymentEvent:
        return PaymentEvent(f"{group}-{n}", EventType.DEPOSIT, who, "USDC", Decimal(amount),
                            "test")

    # The first 6E19 fits NUMERIC(38,18); each next one overflows the balance: Postgres
    # refuses the UPDATE (22003), the ledger raises, as it would on a broken schema.
    big = "60000000000000000000"
    first, over, after = (deposit("d0", rich, big),
                          [deposit(f"o{i}", rich, big) for i in range(3)],
                          deposit("after", calm, "5"))
    with db.cursor() as cur:
        store_events(cur, [first, *over, after])
    produce(topic, [wire_message(e) for e in [first, *over, after]], partition=0)
    port = free_port()
    ledger = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq_topic,
                        extra_args=["--dlq-limit", "2", "--metrics-port", str(port)])

    def stop_row():
        return _one(db, "SELECT reason, detail FROM consumer_stops WHERE group_id = %s", group)

    try:
        wait_until(lambda: stop_row() is not None, 30, "the group's stop")
        wait_until(lambda: _gauge(port, "paystream_consumer_stopped", group) == 1, 10,
                   "the stopped gauge")
    except AssertionError:
        raise AssertionError(ledger.tail(40)) from None
    reason, detail = stop_row()
    assert reason == "dlq_limit_exceeded" and "db_rejected_22003 x3" in detail, detail
    # Committed: the first deposit and the two failures the limit allows; not the third
    # failure, nor anything after it.
    assert committed(group, topic, [0]) == {0: 3}
    assert [{k: v.decode() for k, v in m.headers()}[dlq.H_KIND]
            for m in read_all(dlq_topic, timeout_s=2)] == ["unexpected"] * 2
    assert _one(db, "SELECT status FROM event_status WHERE event_id = %s",
                first.event_id) == ("applied",)
    assert _one(db, "SELECT count(*) FROM processed_events WHERE event_id = ANY(%s)",
                [over[2].event_id, after.event_id]) == (0,)

    health = subprocess.run(paystream_argv("health"), capture_output=True, text=True,
                            timeout=60)
    line = next((x for x in health.stdout.splitlines() if f"group {group} STOPPED" in x), "")
    assert health.returncode == 1 and "dlq_limit_exceeded" in line \
        and f"paystream consume resume {group}" in line, health.stdout
    # The health exporter's gauge, as Prometheus would scrape it.
    exported = {tuple(sorted(sample.labels.items())): sample.value
                for family in HealthCollector(HealthChecker(HealthSettings.from_env()),
                                              ["consumer_stops"]).collect()
                if family.name == "paystream_consumer_group_stopped"
                for sample in family.samples}
    assert exported.get((("group", group), ("reason", "dlq_limit_exceeded"))) == 1
    # A second consumer of the group (a restart) waits too, without joining.
    second = pool.start("ledger", topic=topic, group=group, dlq_topic=dlq_topic,
                        extra_args=["--dlq-limit", "2"])
    wait_until(lambda: bool(second.events("consumer_group_stopped")), 20, "second waits")
    assert not second.events("consumer_started")
    time.sleep(1.5)  # a stopped consumer does not loop: one stop, no exit, no retry
    assert ledger.alive() and len(ledger.events("consumer_group_stopped")) == 1
    assert committed(group, topic, [0]) == {0: 3}

    resumed = subprocess.run(paystream_argv("consume", "resume", group), capture_output=True,
                             text=True, timeout=60)
    assert resumed.returncode == 0 and f"resumed group {group}" in resumed.stdout, resumed
    try:
        wait_until(lambda: _one(db, "SELECT status FROM event_status WHERE event_id = %s",
                                after.event_id) == ("applied",), 30, "progress after resume")
    except AssertionError:
        raise AssertionError(ledger.tail(40) + second.tail(20)) from None
    assert stop_row() is None
    assert committed(group, topic, [0]) == {0: 5}
    assert len(read_all(dlq_topic, timeout_s=2)) == 3
    # Each waiting member notices the resume at its own next poll (about a second): the
    # second may take the partition and apply before the first has logged its own.
    wait_until(lambda: bool(ledger.events("consumer_group_resumed")), 10,
               "the first member's resume")
    wait_until(lambda: _gauge(port, "paystream_consumer_stopped", group) == 0, 10,
               "the gauge back to 0")
    assert ledger.terminate() == 0 and second.terminate() == 0

