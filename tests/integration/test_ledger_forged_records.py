"""Only the outbox can credit: records produced straight to a payment topic, with every
header right, that the outbox did not send, end in the DLQ with their reason and move
no money; the DLQ mirror and `paystream dlq replay` do not take a forged dead letter
for the stored event. Against the real broker and Postgres: ledger and mirror run as
`paystream consume` processes, the replay as the `paystream dlq replay` command."""

from __future__ import annotations

import json
import subprocess
import uuid
from decimal import Decimal

from paystream.consumers.dead_letters import send as dlq
from paystream.consumers.records import Origin, Record
from paystream.finality.evidence import BlockRef
from paystream.finality.store import settlement_wire
from paystream.finality.verify import ChainOutcome, FinalityVerdict
from paystream.launch import paystream_argv
from paystream.schema.chain import ExpectedDeposit
from paystream.schema.events import EventType, PaymentEvent
from tests.support.consumers import (
    create_topic,
    create_users,
    drained,
    produce,
    read_all,
    store_events,
    store_records,
    wait_until,
    wire_message,
)
from tests.support.ids import unique
from tests.support.ledger import ledger_apply


def _replay(dlq_id: int) -> subprocess.CompletedProcess:
    return subprocess.run(paystream_argv("dlq", "replay", str(dlq_id)),
                          capture_output=True, text=True, timeout=60)


def test_forged_records_are_dead_letters_and_credit_nothing(db, pool) -> None:
    topic, dlq_topic = unique("forged-topic"), unique("forged-dlq")
    group, mirror_group = unique("forged-ledger"), unique("forged-mirror")
    create_topic(topic)
    create_topic(dlq_topic)
    user = unique("forged-user")

    def ev(n: str, amount: str) -> PaymentEvent:
        return PaymentEvent(f"{user}-{n}", EventType.DEPOSIT, user, "USDC", Decimal(amount),
                            "test")

    honest, altered, unknown, final = ev("honest", "10"), ev("altered", "5"), \
        ev("unknown", "7"), ev("final", "3")
    with db.cursor() as cur:
        create_users(cur, [user])
        store_events(cur, [honest, altered, final])  # `unknown` is never recorded
        # Already final, and no processed_events row explains a record of it.
        cur.execute("UPDATE event_status SET status = 'applied' WHERE event_id = %s",
                    (final.event_id,))
    forged = PaymentEvent(altered.event_id, EventType.DEPOSIT, user, "USDC",
                          Decimal("1000000"), "test")  # a real event id, another amount
    # Partition 0, in this order: honest, the three forgeries, then the honest record
    # again (a redelivery: a silent duplicate, never a dead letter).
    produce(topic, [wire_message(honest), wire_message(forged), wire_message(unknown),
                    wire_message(final), wire_message(honest)], partition=0)
    pool.start("ledger", topic=topic, group=group, dlq_topic=dlq_topic)
    pool.start("dlq-mirror", topic=dlq_topic, group=mirror_group, dlq_topic=dlq_topic + ".x")
    try:
        wait_until(lambda: drained(group, topic), 60, "the ledger past the forgeries")
        wait_until(lambda: drained(mirror_group, dlq_topic), 60, "the mirror past the DLQ")
    except AssertionError:
        raise AssertionError(pool.logs()) from None

    expected = {1: "content_mismatch", 2: "unknown_event", 3: "status_conflict"}
    reasons = {}
    for msg in read_all(dlq_topic):
        hdr = {k: v.decode() for k, v in msg.headers()}
        reasons[int(hdr[dlq.H_SOURCE_OFFSET])] = hdr[dlq.H_REASON]
    assert reasons == expected
    with db.cursor() as cur:
        cur.execute("SELECT balance FROM balances WHERE user_id = %s", (user,))
        assert cur.fetchall() == [(Decimal(10),)]  # the honest deposit, once
        cur.execute("SELECT source_event_id FROM user_entries"
                    " WHERE book = 'available' AND user_id = %s", (user,))
        assert cur.fetchall() == [(honest.event_id,)]
        cur.execute("SELECT count(*) FROM processed_events WHERE event_id = ANY(%s)",
                    ([altered.event_id, unknown.event_id, final.event_id],))
        assert cur.fetchone() == (0,)
        cur.execute("SELECT source_offset, id, error_reason, error_detail FROM"
                    " dead_letter_queue WHERE source_topic = %s ORDER BY source_offset",
                    (topic,))
        rows = {r[0]: r[1:] for r in cur.fetchall()}
        assert {o: r[1] for o, r in rows.items()} == expected
        # The mirror marks an event dead_lettered only if the dead letter is that event:
        # the forged copy leaves the real event waiting, the final one stays final.
        cur.execute("SELECT event_id, status FROM event_status WHERE event_id = ANY(%s)",
                    ([honest.event_id, altered.event_id, final.event_id],))
        assert dict(cur.fetchall()) == {honest.event_id: "applied",
                                        altered.event_id: "received",
                                        final.event_id: "applied"}

    # None of them can be replayed: the replay sends only a stored, dead-lettered event
    # whose content the dead letter carries.
    refusals = {1: "another content hash", 2: "no payment_events row",
                3: "is applied, not dead_lettered"}
    for offset, words in refusals.items():
        done = _replay(rows[offset][0])
        assert done.returncode == 1 and words in done.stderr, (offset, done)
    # Marked dead_lettered by hand, the forged copy is still not the stored event.
    with db.cursor() as cur:
        cur.execute("UPDATE event_status SET status = 'dead_lettered' WHERE event_id = %s",
                    (altered.event_id,))
    done = _replay(rows[1][0])
    assert done.returncode == 1 and "another content hash" in done.stderr, done
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM dead_letter_queue WHERE source_topic = %s"
                    " AND status = 'open'", (topic,))
        assert cur.fetchone() == (3,)
    for proc in pool.procs:
        assert proc.terminate() == 0, proc.tail()


NET = "ETH_MAINNET"


def _record(body: dict, offset: int) -> Record:
    headers = (("event_id", body["event_id"].encode()),
               ("event_type", body["event_type"].encode()), ("trace_id", b"t-forged"))
    return Record(Origin("paystream.payments", 0, offset), body["user_id"].encode(),
                  json.dumps(body).encode(), headers, None)


def test_a_settlement_the_watcher_did_not_decide_credits_nothing(db, ledger_db) -> None:
    """A deposit_finalized produced for a deposit still pending (the watcher moves it to
    finalizing when it emits the real one), and one under an id that is not derived from
    its deposit's, are dead letters; the pending money stays pending."""
    user = unique("forged-chain")
    tx = "0x" + uuid.uuid4().hex * 2
    chain = {"network": NET, "category": "external", "tx_hash": tx, "block_number": 100,
             "raw_value": hex(15 * 10**17), "decimals": 18, "recipient": "0x" + "11" * 20,
             "sender": "0x" + "22" * 20, "removed": False}
    deposit_id = f"{NET}:{tx}:external"
    asset = f"{NET}:native"
    held = _record({"event_id": deposit_id, "event_type": "deposit", "user_id": user,
                    "asset": asset, "amount": "1.5", "provider": "alchemy", "chain": chain}, 0)
    with db.cursor() as cur:
        create_users(cur, [user])
        store_records(cur, [held])
    assert ledger_apply(ledger_db.connection(), [held]).outcomes["pending_finality"] == 1

    final = FinalityVerdict(ChainOutcome.FINAL, block=BlockRef(100, "0x" + "cd" * 32))
    wire = settlement_wire(ExpectedDeposit.from_chain(deposit_id, chain), final, user, asset,
                           Decimal("1.5"))
    renamed = {**wire, "event_id": deposit_id + ":finalized-again"}
    result = ledger_apply(ledger_db.connection(), [_record(wire, 1), _record(renamed, 2)])
    assert sorted(d.reason for d in result.dead_letters) == ["status_conflict",
                                                             "unknown_event"], result
    assert result.outcomes["applied"] == 0
    with db.cursor() as cur:
        cur.execute("SELECT balance, pending FROM balances WHERE user_id = %s", (user,))
        assert cur.fetchall() == [(Decimal(0), Decimal("1.5"))]
        cur.execute("SELECT state FROM chain_deposits WHERE event_id = %s", (deposit_id,))
        assert cur.fetchone() == ("pending",)
        cur.execute("SELECT status FROM event_status WHERE event_id = %s", (deposit_id,))
        assert cur.fetchone() == ("pending_finality",)


def test_an_altered_copy_in_the_batch_of_its_genuine_record_is_a_dead_letter(
        db, ledger_db) -> None:
    """Repeats of an event inside one batch are dropped only after every record was
    judged: an altered copy ahead of its genuine record neither hides it (the genuine
    one is applied) nor, behind it, passes as its duplicate."""
    user = unique("forged-batch")
    first, second = (PaymentEvent(f"{user}-{n}", EventType.DEPOSIT, user, "USDC",
                                  Decimal(a), "test") for n, a in (("a", "10"), ("b", "4")))
    with db.cursor() as cur:
        create_users(cur, [user])
        store_events(cur, [first, second])

    def record(event: PaymentEvent, amount: str, offset: int) -> Record:
        body = {**event.to_wire(), "amount": amount}
        return _record(body, offset)

    # The forgery of `first` comes before it; the forgery of `second` after it.
    batch = [record(first, "1000", 0), record(first, "10", 1), record(second, "4", 2),
             record(second, "4000", 3)]
    result = ledger_apply(ledger_db.connection(), batch)
    assert sorted((d.record.origin.offset, d.reason) for d in result.dead_letters) == [
        (0, "content_mismatch"), (3, "content_mismatch")], result
    assert result.outcomes["applied"] == 2 and result.outcomes["duplicate"] == 0, result
    with db.cursor() as cur:
        cur.execute("SELECT balance FROM balances WHERE user_id = %s", (user,))
        assert cur.fetchall() == [(Decimal(14),)]
