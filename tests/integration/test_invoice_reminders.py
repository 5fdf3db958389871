"""An unpaid invoice's reminder chain against a real receiver: each step delivered
exactly once across a SIGKILL of the notifier at each step (after the claim before the
send, and after the send), a new cycle when the operator extends the deadline, and a
step missed while no notifier ran claimed as skipped and counted, never sent late.

The chain is seconds long here (the test's own notifier's PAYSTREAM_INVOICE_REMINDERS,
period and window), and the invoices' deadlines are set a few seconds after their
creation (the API's shortest is 60 s), so the file runs in about a minute and a half.
Every count is the receiver's own record of what it verified.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from paystream.chaos.receiver import Receiver, receiver
from paystream.invoices import create
from paystream.launch import paystream_argv
from paystream.notify.crash_hooks import AFTER_CLAIM
from paystream.notify.intents import now_text
from paystream.notify.reminders import invoice_key, remind_once
from paystream.notify.seal import process_sealer
from paystream.notify.settings import ReminderSettings
from paystream.schema.db import Connection, connect, database_url
from tests.support.consumers import ConsumerProcess, ProcessPool, create_topic
from tests.support.ids import unique
from tests.support.notify import FAST, add_endpoint
from tests.support.waiting import wait_until

KIND = "reminder.invoice_unpaid"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Merchant:
    """A user with an endpoint on the module's receiver that takes `events`."""

    user: str
    path: str
    endpoint_id: str


@pytest.fixture(scope="module")
def hooks() -> Iterator[Receiver]:
    # A port of its own: other notifier tests share the default one.
    with receiver(free_port()) as server:
        yield server


def merchant(hooks: Receiver, db: Connection, made: list[str], events: str) -> Merchant:
    user = unique("inv-remind")
    path = f"/ok/{user}"
    endpoint_id, secret = add_endpoint(hooks.url(path), user, events)
    hooks.secrets[path] = secret
    made.append(endpoint_id)
    return Merchant(user, path, endpoint_id)


@dataclass(frozen=True)
class Made:
    invoice_id: str
    created_at: datetime
    expires_at: datetime


def new_invoice(db: Connection, user: str, life_s: float, amount: str = "25") -> Made:
    """An invoice made as the API makes it (invoices.create), its deadline then set
    `life_s` after its creation."""
    wanted = create.parse_request(user, "USD", amount, create.MIN_EXPIRES_IN_S,
                                  order_id=unique("order"))
    with db.cursor() as cur:
        _, answer, _ = create.create(cur, key_id=None, idempotency_key=None, wanted=wanted,
                                     created_at_text=now_text(), sealer=process_sealer())
        cur.execute("UPDATE invoices SET expires_at = created_at + make_interval(secs => %s)"
                    " WHERE invoice_id = %s RETURNING created_at, expires_at",
                    (life_s, answer["invoice_id"]))
        created_at, expires_at = cur.fetchone()
    return Made(answer["invoice_id"], created_at, expires_at)


def reminder_env(offsets: str, window_s: float) -> dict[str, str]:
    return {**FAST, "PAYSTREAM_INVOICE_REMINDERS": offsets,
            "PAYSTREAM_REMIND_PERIOD_S": "0.3", "PAYSTREAM_REMIND_WINDOW_S": str(window_s)}


def start_notifier(pool: ProcessPool, env: dict[str, str], metrics_port: int = 0
                   ) -> ConsumerProcess:
    """`paystream consume notifier` (consumer, sender and reminder threads, as `paystream
    run` starts it) on a topic of its own: the reminders are its scheduler's."""
    topic, dlq = unique("inv-remind"), unique("inv-remind-dlq")
    create_topic(topic, partitions=1)
    create_topic(dlq, partitions=1)
    return pool.start("notifier", topic=topic, group=unique("inv-remind-grp"), dlq_topic=dlq,
                      extra_args=("--metrics-port", str(metrics_port)), env=env)


def received(hooks: Receiver, path: str, invoice_id: str) -> list[dict[str, Any]]:
    """The reminders of `invoice_id` the receiver verified, in arrival order."""
    return [b for b in hooks.bodies(path)
            if b["type"] == KIND and b["data"]["invoice_id"] == invoice_id]


def keys_of(body: list[dict[str, Any]]) -> Counter[str]:
    return Counter(b["data"]["reminder_key"] for b in body)


def claims(db: Connection, invoice_id: str) -> dict[str, tuple[str | None, bool]]:
    with db.cursor() as cur:
        cur.execute("SELECT reminder_key, intent_id, skipped FROM notification_reminders"
                    " WHERE reminder_key LIKE %s", (f"invoice_unpaid:{invoice_id}:%",))
        return {key: (intent, skipped) for key, intent, skipped in cur.fetchall()}


def slot(db: Connection, endpoint_id: str, intent_id: str | None) -> tuple[str, int, int]:
    """The reminder's delivery slot: (state, claims so far, attempts that ended)."""
    with db.cursor() as cur:
        cur.execute("SELECT d.state, d.attempts, (SELECT count(*) FROM notification_attempts a"
                    " WHERE a.intent_id = d.intent_id AND a.endpoint_id = d.endpoint_id)"
                    " FROM notification_deliveries d WHERE d.endpoint_id = %s"
                    " AND d.intent_id = %s", (endpoint_id, intent_id))
        row = cur.fetchone()
        return ("none", 0, 0) if row is None else (row[0], int(row[1]), int(row[2]))


def sleep_until(moment: datetime) -> None:
    """Wait for a wall-clock moment (the database's clock and ours are the host's)."""
    time.sleep(max(0.0, (moment - datetime.now(moment.tzinfo)).total_seconds()))


def test_each_reminder_reaches_the_receiver_once_across_sigkills(
        db: Connection, pool: ProcessPool, hooks: Receiver, endpoints: list[str]) -> None:
    # Steps 40 s, 25 s and 10 s before a deadline 45 s after creation: at +5, +20, +35;
    # 15 s apart, each due for 8 s.
    offsets = (40, 25, 10)
    env = reminder_env(",".join(map(str, offsets)), window_s=8)
    m = merchant(hooks, db, endpoints, "reminder.*")
    notifier = start_notifier(pool, {**env, AFTER_CLAIM: "1"})
    invoice = new_invoice(db, m.user, life_s=45)
    kills: Counter[str] = Counter()
    for offset in offsets:
        key = invoice_key(invoice.invoice_id, invoice.expires_at, offset)
        # 1. A notifier armed to SIGKILL itself once its sender claims a delivery (this
        #    step's, unless another test's slot came first): claimed, never sent.
        wait_until(lambda k=key, n=notifier: k in claims(db, invoice.invoice_id)
                   or not n.alive(), offset + 30, f"the {offset} s step claimed",
                   interval_s=0.1)
        wait_until(lambda n=notifier: not n.alive(), 10, "the armed notifier dead",
                   interval_s=0.1)
        intent = claims(db, invoice.invoice_id).get(key, (None, False))[0]
        # Claimed once, no attempt ended: it died between this step's claim and its send.
        aimed = slot(db, m.endpoint_id, intent) == ("pending", 1, 0)
        kills["this step's claim, before its send" if aimed else "another claim"] += 1
        # 2. A plain one sends it once the dead one's lease lapses; SIGKILLed as soon as
        #    the delivery is recorded.
        notifier = start_notifier(pool, env)
        wait_until(lambda k=key: keys_of(received(hooks, m.path, invoice.invoice_id))[k] >= 1,
                   40, f"the {offset} s step delivered", interval_s=0.1)
        wait_until(lambda k=key: slot(db, m.endpoint_id, claims(db, invoice.invoice_id)[k][0]
                                      )[0] == "delivered", 10, "its delivery recorded",
                   interval_s=0.1)
        notifier.kill()
        kills["after the send"] += 1
        # 3. The next step's armed notifier.
        notifier = start_notifier(pool, {**env, AFTER_CLAIM: "1"})
    notifier.kill()
    assert not hooks.refused(), hooks.refused()[:3]
    bodies = received(hooks, m.path, invoice.invoice_id)
    expected = {invoice_key(invoice.invoice_id, invoice.expires_at, o): o for o in offsets}
    # Exactly one delivery of each step, by the receiver's record, and nothing else.
    assert keys_of(bodies) == Counter(list(expected)), keys_of(bodies)
    for body in bodies:
        data = body["data"]
        assert data["offset_s"] == expected[data["reminder_key"]]
        assert data["amount_due"] == "25" and data["user_id"] == m.user
        assert datetime.fromisoformat(data["expires_at"]) == invoice.expires_at
    assert {k: s for k, (_, s) in claims(db, invoice.invoice_id).items()} == {
        k: False for k in expected}
    print(f"\n3 reminders through {sum(kills.values())} SIGKILLs {dict(kills)}:"
          f" {len(bodies)} deliveries")


def test_an_extended_deadline_starts_a_new_cycle(
        db: Connection, pool: ProcessPool, hooks: Receiver, endpoints: list[str]) -> None:
    # Steps 9 s and 3 s before a deadline 12 s after creation (+3, +9); extended by
    # 8 s after the first (about +5: the old +9 step is never due), the new cycle's are
    # at +11 and +17.
    m = merchant(hooks, db, endpoints, "reminder.*")
    notifier = start_notifier(pool, reminder_env("9,3", window_s=2))
    invoice = new_invoice(db, m.user, life_s=12)
    first = invoice_key(invoice.invoice_id, invoice.expires_at, 9)
    wait_until(lambda: first in keys_of(received(hooks, m.path, invoice.invoice_id)), 30,
               "the first cycle's 9 s step", interval_s=0.1)
    done = subprocess.run(paystream_argv("invoices", "extend", invoice.invoice_id, "--by",
                                         "8s"), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "new cycle" in done.stdout
    later = invoice.expires_at + timedelta(seconds=8)
    new_cycle = [invoice_key(invoice.invoice_id, later, o) for o in (9, 3)]
    wait_until(lambda: set(new_cycle) <= set(keys_of(received(hooks, m.path,
                                                              invoice.invoice_id))),
               45, "the new cycle's two steps", interval_s=0.2)
    notifier.kill()
    bodies = received(hooks, m.path, invoice.invoice_id)
    # The old cycle's 3 s step (its deadline moved) is never made.
    assert keys_of(bodies) == Counter([first, *new_cycle]), keys_of(bodies)
    assert [datetime.fromisoformat(b["data"]["expires_at"]) for b in bodies] == [
        invoice.expires_at, later, later]
    shown = subprocess.run(paystream_argv("invoices", "show", invoice.invoice_id, "--json"),
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert '"cause": "extended"' in shown.stdout


def _skipped_total(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith('paystream_reminders_skipped_total{kind="invoice_unpaid"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_step_missed_while_the_notifier_was_down_is_counted_not_sent(
        db: Connection, pool: ProcessPool, hooks: Receiver, endpoints: list[str],
        tmp_path: Path) -> None:
    # Deadline 25 s after creation; steps 40 s (before the creation: none at all), 20 s
    # (+5, due until +8) and 10 s (+15). No notifier runs until +9.
    m = merchant(hooks, db, endpoints, "reminder.*")
    invoice = new_invoice(db, m.user, life_s=25, amount="7.5")
    keys = {o: invoice_key(invoice.invoice_id, invoice.expires_at, o) for o in (40, 20, 10)}
    sleep_until(invoice.created_at + timedelta(seconds=9))
    port = free_port()
    notifier = start_notifier(pool, reminder_env("40,20,10", window_s=3), metrics_port=port)
    wait_until(lambda: keys[10] in keys_of(received(hooks, m.path, invoice.invoice_id)), 30,
               "the 10 s step delivered", interval_s=0.2)
    skipped_total = _skipped_total(port)
    notifier.kill()
    assert keys_of(received(hooks, m.path, invoice.invoice_id)) == Counter([keys[10]])
    found = claims(db, invoice.invoice_id)
    assert found[keys[20]] == (None, True)  # claimed as skipped: no intent
    assert found[keys[10]][1] is False and found[keys[10]][0] is not None
    assert keys[40] not in found  # before the invoice existed: not a step at all
    # Counted as logged: one line per skipped step, this one's among them (the sweep
    # of the process's first scan claims any other invoice's missed steps too).
    logged = notifier.events("reminder_skipped")
    assert skipped_total == len(logged) >= 1, (skipped_total, notifier.tail())
    assert [e["reminder_key"] for e in logged].count(keys[20]) == 1, logged
    assert Decimal(received(hooks, m.path, invoice.invoice_id)[0]["data"]["amount_due"]) == (
        Decimal("7.5"))


def test_an_extensions_steps_already_past_are_no_steps_at_all(db: Connection) -> None:
    # Created at +0 with its deadline at +16; extended by 20 s at +3: the new deadline is
    # +36, whose 34 s step (+2) came after the creation but before the extension. It was
    # never due, so a scan looking back (the sweep of a restarted notifier) neither sends
    # it nor counts it as skipped. The scan runs as the notifier does, as its role.
    m_user = unique("inv-ext-user")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (m_user,))
    invoice = new_invoice(db, m_user, life_s=16)
    sleep_until(invoice.created_at + timedelta(seconds=3))
    done = subprocess.run(paystream_argv("invoices", "extend", invoice.invoice_id, "--by",
                                         "20s"), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    later = invoice.expires_at + timedelta(seconds=20)
    settings = ReminderSettings.from_env({"PAYSTREAM_INVOICE_REMINDERS": "34",
                                          "PAYSTREAM_REMIND_PERIOD_S": "0.3",
                                          "PAYSTREAM_REMIND_WINDOW_S": "1"})
    conn = connect(database_url("notifier"))
    try:
        remind_once(conn, settings, sweep=True)
    finally:
        conn.close()
    assert invoice_key(invoice.invoice_id, later, 34) not in claims(db, invoice.invoice_id)
    # The same step of an invoice whose deadline was set at its creation is a skip: the
    # rule tells the two apart by when the deadline was set, not by the step alone.
    other = new_invoice(db, m_user, life_s=36)
    sleep_until(other.created_at + timedelta(seconds=3.5))
    conn = connect(database_url("notifier"))
    try:
        remind_once(conn, settings, sweep=True)
    finally:
        conn.close()
    assert claims(db, other.invoice_id) == {
        invoice_key(other.invoice_id, other.expires_at, 34): (None, True)}
