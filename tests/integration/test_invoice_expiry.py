"""The invoice expiry scheduler and the operator's invoice commands on the real stack:
an unpaid invoice past its deadline expires (state, history, invoice.expired delivered
to a real receiver through the outbox, Debezium and the notifier), an operator cancels
an unpaid one and is refused what is not allowed; two schedulers racing expire each
invoice once (counted on paystream.notifications, as Debezium wrote it); an invoice with
a payment pending is left open; a payment made before the deadline that reaches the
ledger after the expiry still settles the invoice.

The deadlines are moved into the past by SQL (the API's shortest is 60 s), so nothing
waits for a clock."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from paystream.chaos.receiver import Receiver, receiver
from paystream.consumers.connection import Database
from paystream.launch import paystream_argv
from paystream.notify.intents import parse_batch
from paystream.notify.seal import process_sealer
from paystream.schema.db import Connection
from paystream.schema.events import NOTIFICATIONS_TOPIC, EventType, PaymentEvent
from tests.integration.test_invoice_reminders import free_port, merchant, new_invoice
from tests.support.consumers import (
    ProcessPool,
    create_topic,
    record_of,
    start_at_end,
    store_events,
    wire_message,
)
from tests.support.ids import unique
from tests.support.ledger import ledger_apply
from tests.support.notify import FAST
from tests.support.topics import TopicReader
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def hooks() -> Iterator[Receiver]:
    with receiver(free_port()) as server:
        yield server


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(paystream_argv(*args), capture_output=True, text=True, timeout=60)


def past_deadline(db: Connection, invoice_ids: list[str]) -> None:
    with db.cursor() as cur:
        cur.execute("UPDATE invoices SET expires_at = now() - interval '1 second'"
                    " WHERE invoice_id = ANY(%s)", (invoice_ids,))


def states(db: Connection, invoice_ids: list[str]) -> dict[str, tuple[str, str | None]]:
    with db.cursor() as cur:
        cur.execute("SELECT invoice_id, state, additional_status FROM invoices"
                    " WHERE invoice_id = ANY(%s)", (invoice_ids,))
        return {row[0]: (row[1], row[2]) for row in cur.fetchall()}


def causes(db: Connection, invoice_ids: list[str]) -> dict[str, list[str]]:
    with db.cursor() as cur:
        cur.execute("SELECT invoice_id, cause FROM invoice_history WHERE invoice_id = ANY(%s)"
                    " ORDER BY id", (invoice_ids,))
        found: dict[str, list[str]] = {i: [] for i in invoice_ids}
        for invoice_id, cause in cur.fetchall():
            found[invoice_id].append(cause)
        return found


def test_an_unpaid_invoice_expires_and_its_user_is_told(
        db: Connection, pool: ProcessPool, hooks: Receiver, endpoints: list[str]) -> None:
    # The notifier reads paystream.notifications from here on, as `paystream run`'s does.
    group = unique("inv-expiry-grp")
    start_at_end(group, NOTIFICATIONS_TOPIC)
    dlq = unique("inv-expiry-dlq")
    create_topic(dlq, partitions=1)
    m = merchant(hooks, db, endpoints, "invoice.*")
    notifier = pool.start("notifier", topic=NOTIFICATIONS_TOPIC, group=group, dlq_topic=dlq,
                          env=FAST)
    due, unpaid = new_invoice(db, m.user, 60), new_invoice(db, m.user, 60, amount="3")
    past_deadline(db, [due.invoice_id])

    done = cli("invoices", "expire")
    assert done.returncode == 0, done.stderr
    assert states(db, [due.invoice_id, unpaid.invoice_id]) == {
        due.invoice_id: ("expired", None), unpaid.invoice_id: ("new", None)}
    shown = json.loads(cli("invoices", "show", due.invoice_id, "--json").stdout)
    assert [(h["state"], h["cause"]) for h in shown["history"]] == [
        ("new", "created"), ("expired", "expired")]
    assert shown["amount_due"] == "25"
    # The operator: an unpaid invoice cancelled; what is not open refused, with why.
    cancelled = cli("invoices", "cancel", unpaid.invoice_id)
    assert cancelled.returncode == 0 and "invalid" in cancelled.stdout, cancelled.stderr
    again = cli("invoices", "cancel", unpaid.invoice_id)
    assert again.returncode == 1 and "is invalid" in again.stderr, again
    late = cli("invoices", "extend", due.invoice_id, "--by", "1h")
    assert late.returncode == 1 and "is expired" in late.stderr, late
    bad = cli("invoices", "extend", due.invoice_id, "--by", "soon")
    assert bad.returncode == 2 and "not a duration" in bad.stderr, bad
    missing = cli("invoices", "show", "inv_" + "0" * 32)
    assert missing.returncode == 1 and "no invoice" in missing.stderr, missing
    listed = json.loads(cli("invoices", "list", "--user", m.user, "--json").stdout)
    assert {i["invoice_id"]: i["state"] for i in listed} == {
        due.invoice_id: "expired", unpaid.invoice_id: "invalid"}
    table = cli("invoices", "list", "--user", m.user, "--status", "expired").stdout
    assert due.invoice_id in table and unpaid.invoice_id not in table

    # The receiver's own record: each change told once, by the intents the scheduler and
    # the operator wrote to the outbox.
    wanted = Counter({("invoice.created", due.invoice_id): 1,
                      ("invoice.created", unpaid.invoice_id): 1,
                      ("invoice.expired", due.invoice_id): 1,
                      ("invoice.invalid", unpaid.invoice_id): 1})

    def told() -> Counter[tuple[str, str]]:
        return Counter((b["type"], b["data"]["invoice_id"]) for b in hooks.bodies(m.path))

    wait_until(lambda: told() == wanted, 90, "the four notifications", interval_s=0.5)
    assert notifier.alive(), notifier.tail()
    notifier.kill()
    assert not hooks.refused(), hooks.refused()[:3]
    expired = next(b for b in hooks.bodies(m.path) if b["type"] == "invoice.expired")
    assert (expired["data"]["state"], expired["data"]["amount_due"],
            expired["data"]["user_id"]) == ("expired", "25", m.user)


def _intents_of(reader: TopicReader, kind: str) -> list[str]:
    """The invoice ids of the `kind` intents read from the topic so far."""
    found = []
    for msg in reader.read(100_000, 1.0):
        value = json.loads(msg.value())
        if isinstance(value, str):  # the router's payload as a JSON string
            value = json.loads(value)
        for intent, _ in parse_batch(value, process_sealer())[0]:
            if intent.type.value == kind:
                found.append(str(intent.data.get("invoice_id")))
    return found


def test_two_schedulers_racing_expire_each_invoice_once(
        db: Connection, tmp_path: Path, topic_reader: Callable[[str], TopicReader]) -> None:
    reader = topic_reader(NOTIFICATIONS_TOPIC)
    user = unique("inv-race")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    made = [new_invoice(db, user, 60, amount="1").invoice_id for _ in range(40)]
    past_deadline(db, made)
    procs, logs = [], []
    for n in range(2):
        logs.append(tmp_path / f"expire-{n}.log")
        with open(logs[-1], "wb") as out:
            procs.append(subprocess.Popen(
                paystream_argv("invoices", "expire", "--loop", "--limit", "3", "--interval",
                               "0.2"), stdout=out, stderr=subprocess.STDOUT, env=os.environ))
    try:
        wait_until(lambda: {s for s, _ in states(db, made).values()} == {"expired"}, 60,
                   "all 40 expired", interval_s=0.2)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)
    # Each invoice's expiry happened once: one history line, one intent on the topic.
    assert all(c == ["created", "expired"] for c in causes(db, made).values()), causes(db, made)
    seen: list[str] = []

    def all_seen() -> bool:
        seen.extend(_intents_of(reader, "invoice.expired"))
        return set(made) <= set(seen)

    wait_until(all_seen, 60, "40 invoice.expired on the topic")
    seen.extend(_intents_of(reader, "invoice.expired"))  # a second one would be here
    mine = Counter(i for i in seen if i in set(made))
    assert mine == Counter(made), mine
    by_process = [sum(1 for line in log.read_text().splitlines()
                      if "invoice_expired" in line and any(i in line for i in made))
                  for log in logs]
    assert sum(by_process) == 40, by_process
    print(f"\n40 invoices, two schedulers at 3 a round: {by_process} expired by each")


def test_an_invoice_with_a_payment_pending_is_not_expired(db: Connection) -> None:
    user = unique("inv-pending")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    pending, unpaid = new_invoice(db, user, 60), new_invoice(db, user, 60)
    # A chain payment seen before the deadline, not final yet: what the ledger's
    # matching records for a pending deposit.
    with db.cursor() as cur:
        cur.execute("INSERT INTO invoice_payments (event_id, invoice_id, amount, state,"
                    " seen_at, late) VALUES (%s, %s, 25, 'pending', now(), false)",
                    (unique("dep"), pending.invoice_id))
        cur.execute("UPDATE invoices SET state = 'processing', amount_pending = 25"
                    " WHERE invoice_id = %s", (pending.invoice_id,))
    past_deadline(db, [pending.invoice_id, unpaid.invoice_id])
    done = cli("invoices", "expire")
    assert done.returncode == 0, done.stderr
    assert states(db, [pending.invoice_id, unpaid.invoice_id]) == {
        pending.invoice_id: ("processing", None), unpaid.invoice_id: ("expired", None)}
    assert causes(db, [pending.invoice_id]) == {pending.invoice_id: ["created"]}


def test_a_payment_made_before_the_deadline_still_wins_after_the_expiry(
        db: Connection, ledger_db: Database) -> None:
    user = unique("inv-late-word")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    invoice = new_invoice(db, user, 60)
    past_deadline(db, [invoice.invoice_id])
    assert cli("invoices", "expire").returncode == 0
    assert states(db, [invoice.invoice_id])[invoice.invoice_id] == ("expired", None)
    # The gateway reports a deposit made 30 s before the deadline, after the expiry.
    with db.cursor() as cur:
        cur.execute("SELECT expires_at FROM invoices WHERE invoice_id = %s",
                    (invoice.invoice_id,))
        paid_at = cur.fetchone()[0] - timedelta(seconds=30)
    deposit = PaymentEvent(unique("inv-dep"), EventType.DEPOSIT, user, "USD", Decimal("25"),
                           "payments", occurred_at=paid_at.isoformat(),
                           invoice_id=invoice.invoice_id)
    with db.cursor() as cur:
        store_events(cur, [deposit])
    result = ledger_apply(ledger_db.connection(),
                          [record_of(wire_message(deposit), offset=random.randrange(1 << 40))])
    assert not result.dead_letters, result.dead_letters
    assert states(db, [invoice.invoice_id])[invoice.invoice_id] == ("settled", None)
    assert causes(db, [invoice.invoice_id])[invoice.invoice_id] == [
        "created", "expired", f"payment:{deposit.event_id}"]


def test_cli_refuses_bad_arguments(db: Connection) -> None:
    listing = cli("invoices", "list", "--status", "paid")
    assert listing.returncode == 2 and "status must be one of" in listing.stderr, listing
    assert cli("invoices", "list", "--limit", "0").returncode == 2
    assert cli("invoices", "expire", "--limit", "0").returncode == 2


