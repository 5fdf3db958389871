"""Invoices paid for real (invoices/matching.py, docs/invoices.md): a real anvil of the
module's own, real native and ERC-20 transfers to each invoice's dedicated address, the
ingest, `consume ledger`, `consume finality` and `consume scanner` as subprocesses
(tests/support/chain/pipeline.py), the stack's Postgres, Debezium and Kafka.

Each invoice's state, additional status and sums are checked against the test's own
record of what it paid on chain (the amounts it sent, read back from the chain's
receipts), the user's balance against the same record, and the invoice.* intents as
they arrive on paystream.notifications (Kafka, through the outbox and Debezium) and then
at a real webhook receiver (a notifier of the module's own delivers them): paid
100 %, 90 % with a 10 % tolerance and without one (partial, then expired), 110 %
(over), after the deadline (late, the user still credited), in two payments, with the
webhook lost (the scanner alone reports it, at its block's time), and a gateway invoice
paid by a signed Standard Webhooks deposit naming it; on a network with a credit depth,
a settled invoice whose credited payment a reorg takes back becomes invalid (a second
pipeline and anvil of the module's own). `reconcile`'s invoice check fires
on an invoice whose sums were corrupted (this test's own, in a transaction rolled back).
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest

from paystream.chaos.receiver import Receiver, receiver
from paystream.consumers.ledger.reconcile import Report
from paystream.consumers.ledger.reconcile_report import format_report
from paystream.invoices.create import InvoiceRequest, create
from paystream.invoices.reconcile_check import find_invoice_mismatches
from paystream.launch import free_port, paystream_argv
from paystream.notify.intents import now_text, parse_batch
from paystream.notify.seal import process_sealer
from paystream.reconcile_checks import invoice_findings
from paystream.schema.db import connect, database_url
from paystream.schema.events import NOTIFICATIONS_TOPIC
from tests.support.chain.node import AnvilUnavailableError, Chain, Token, running_anvil
from tests.support.chain.pipeline import Pipeline, persisted_anvil
from tests.support.chain.scanning import cursor, start_scanner
from tests.support.consumers import ConsumerProcess, create_topic, start_at_end
from tests.support.ids import unique
from tests.support.ingest import create_users, payment_body, payment_headers
from tests.support.notify import FAST
from tests.support.topics import TopicReader
from tests.support.waiting import wait_for

WEI = 10**18
ETH = Decimal(WEI)


@pytest.fixture(scope="module")
def chain() -> Iterator[Chain]:
    # An anvil of this module's own: the shared scanner anvil's port may be in use by
    # the scanner tests running beside these.
    try:
        with running_anvil(free_port(), name=f"anvil-invoices-{uuid.uuid4().hex[:6]}") as node:
            yield node
    except AnvilUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def pipe(chain: Chain, token: Token) -> Iterator[Pipeline]:
    with Pipeline(chain) as p:
        start_scanner(p, chain)
        wait_for("the scanner's cursor", lambda: cursor(p) is not None, timeout=30)
        yield p


class Intents:
    """The invoice.* intents arriving on paystream.notifications from the module's
    start, by invoice id, and what a real receiver got of them: a `consume notifier` of
    the module's own (a group from the topic's end, as `paystream run`'s) delivers every
    invoice.* intent to one endpoint for all users, whose receiver checks each signature
    with the Standard Webhooks reference library."""

    def __init__(self, hooks: Receiver) -> None:
        self.reader = TopicReader(NOTIFICATIONS_TOPIC)
        self.seen: dict[str, list[dict[str, Any]]] = {}
        self.hooks = hooks

    def delivered(self, invoice_id: str) -> dict[str, str]:
        """The receiver's invoice.* deliveries of `invoice_id`: intent id -> type."""
        return {b["id"]: b["type"] for b in self.hooks.bodies(HOOK_PATH)
                if b["data"].get("invoice_id") == invoice_id}

    def drain(self) -> None:
        for msg in self.reader.read(10_000, 0.3):
            intents, _ = parse_batch(json.loads(msg.value()), process_sealer())
            for intent, _trace in intents:
                invoice_id = intent.data.get("invoice_id")
                if intent.type.value.startswith("invoice.") and invoice_id:
                    self.seen.setdefault(invoice_id, []).append(intent.body())

    def types(self, invoice_id: str) -> list[str]:
        return [i["type"] for i in self.seen.get(invoice_id, [])]

    def wait(self, invoice_id: str, *wanted: str) -> list[dict[str, Any]]:
        def probe() -> list[dict[str, Any]] | None:
            self.drain()
            got = self.types(invoice_id)
            return self.seen[invoice_id] if all(w in got for w in wanted) else None
        published = wait_for(f"intents {wanted} of {invoice_id} (have "
                             f"{self.types(invoice_id)})", probe, timeout=60)
        # Each published intent reaches the receiver, under its own id, and nothing
        # else of this invoice does.
        expected = {i["id"]: i["type"] for i in published}
        wait_for(f"{sorted(expected.values())} of {invoice_id} at the receiver (have "
                 f"{sorted(self.delivered(invoice_id).values())})",
                 lambda: expected.items() <= self.delivered(invoice_id).items() or None,
                 timeout=60)
        return published


HOOK_PATH = "/invoices"


@pytest.fixture(scope="module")
def intents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Intents]:
    group, dlq = unique("inv-pay-notifier"), unique("inv-pay-notifier-dlq")
    start_at_end(group, NOTIFICATIONS_TOPIC)
    create_topic(dlq, partitions=1)
    with receiver(free_port()) as hooks:
        added = subprocess.run(paystream_argv("endpoints", "add", "--url", hooks.url(HOOK_PATH),
                                              "--events", "invoice.*"),
                               capture_output=True, text=True, timeout=60)
        found = re.search(r"endpoint (ep_[0-9a-f]{24}) added", added.stdout)
        secret = re.search(r"secret: (whsec_\S+)", added.stdout)
        assert added.returncode == 0 and found and secret, added.stdout + added.stderr
        hooks.secrets[HOOK_PATH] = secret.group(1)
        notifier = ConsumerProcess.start("notifier", topic=NOTIFICATIONS_TOPIC, group=group,
                                         dlq_topic=dlq, env=FAST,
                                         log_dir=tmp_path_factory.mktemp("notifier"))
        watched = Intents(hooks)
        try:
            yield watched
        finally:
            notifier.kill()
            watched.reader.close()
            # Disabled: no later test's sender tries a receiver that is gone.
            subprocess.run(paystream_argv("endpoints", "disable", found.group(1)),
                           capture_output=True, timeout=60)


# --- helpers ---------------------------------------------------------------------------

def new_invoice(user: str, asset: str, amount: Decimal, *, expires_in_s: int = 3600,
                tolerance: Decimal = Decimal(0)) -> dict[str, Any]:
    """An invoice through the creation code the merchant API calls (a chain invoice
    takes the user's spare deposit address)."""
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            status, answer, _ = create(
                cur, key_id=None, idempotency_key=None, created_at_text=now_text(),
                sealer=process_sealer(), wanted=InvoiceRequest(user, asset, amount, expires_in_s,
                                      tolerance_pct=tolerance))
    finally:
        conn.close()
    assert status == 201, answer
    return answer


def standing(pipe: Pipeline, invoice_id: str) -> tuple[str, str | None, Decimal, Decimal]:
    [row] = pipe.query("SELECT state, additional_status, amount_paid, amount_pending"
                       " FROM invoices WHERE invoice_id = %s", (invoice_id,))
    return row[0], row[1], row[2], row[3]


def wait_standing(pipe: Pipeline, invoice_id: str, expected: tuple[str, str | None, Decimal,
                                                                     Decimal],
                  timeout: float = 60) -> None:
    def probe() -> bool:
        pipe.check_alive()
        return standing(pipe, invoice_id) == expected
    try:
        wait_for(f"invoice {invoice_id} to be {expected}", probe, timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; it is {standing(pipe, invoice_id)}") from None


def payments(pipe: Pipeline, invoice_id: str) -> dict[str, tuple[str, Decimal, bool]]:
    return {r[0]: (r[1], r[2], r[3]) for r in pipe.query(
        "SELECT event_id, state, amount, late FROM invoice_payments WHERE invoice_id = %s",
        (invoice_id,))}


def history(pipe: Pipeline, invoice_id: str) -> list[tuple[str, str | None, str]]:
    return [(r[0], r[1], r[2]) for r in pipe.query(
        "SELECT state, additional_status, cause FROM invoice_history WHERE invoice_id = %s"
        " ORDER BY id", (invoice_id,))]


def sent_native(chain: Chain, tx: str) -> Decimal:
    """What a native transfer moved, as the chain says (the test's own record)."""
    receipt = chain.receipt(tx)
    assert receipt is not None and int(receipt["status"], 16) == 1
    transaction = chain.transaction(tx)
    assert transaction is not None
    return Decimal(int(transaction["value"], 16)) / ETH


def sent_token(chain: Chain, token: Token, tx: str, to: str) -> Decimal:
    """What a token transfer moved to `to`, from its receipt's Transfer logs."""
    receipt = chain.receipt(tx)
    assert receipt is not None and int(receipt["status"], 16) == 1
    raw = sum(int(log["data"], 16) for log in receipt["logs"]
              if log["address"].lower() == token.address and len(log["topics"]) == 3
              and log["topics"][2][-40:] == to[2:])
    return Decimal(raw) / Decimal(10**token.decimals)


def block_of(chain: Chain, tx: str) -> int:
    receipt = chain.receipt(tx)
    assert receipt is not None
    return int(receipt["blockNumber"], 16)


def deadline_passed(pipe: Pipeline, invoice_id: str) -> bool:
    return bool(pipe.query("SELECT now() > expires_at FROM invoices WHERE invoice_id = %s",
                           (invoice_id,))[0][0])


def chain_invoice(pipe: Pipeline, asset: str, amount: Decimal, **kwargs: Any
                  ) -> tuple[str, str, dict[str, Any]]:
    user, address = pipe.new_user()
    invoice = new_invoice(user, asset, amount, **kwargs)
    assert (invoice["network"], invoice["address"]) == (pipe.network, address)
    return user, address, invoice


def native(pipe: Pipeline) -> str:
    return f"{pipe.network}:native"


ZERO = Decimal(0)


# --- chain invoices ----------------------------------------------------------------------

def test_paid_in_full_is_processing_then_settled(pipe: Pipeline, chain: Chain,
                                                 intents: Intents) -> None:
    user, address, invoice = chain_invoice(pipe, native(pipe), Decimal("1.25"))
    invoice_id = invoice["invoice_id"]
    tx = chain.send_native(address, 125 * WEI // 100)
    paid = sent_native(chain, tx)
    pipe.deliver([tx], address)
    wait_standing(pipe, invoice_id, ("processing", None, ZERO, paid))
    chain.finalize(block_of(chain, tx))
    wait_standing(pipe, invoice_id, ("settled", None, paid, ZERO))
    assert pipe.balances(user) == {native(pipe): (paid, 0)}
    [(state, amount, late)] = payments(pipe, invoice_id).values()
    assert (state, amount, late) == ("credited", paid, False)
    assert [h[:2] for h in history(pipe, invoice_id)] == [
        ("new", None), ("processing", None), ("settled", None)]
    got = intents.wait(invoice_id, "invoice.created", "invoice.processing",
                       "invoice.settled")
    settled = next(i for i in got if i["type"] == "invoice.settled")
    assert settled["data"]["amount_paid"] == str(paid.normalize())
    assert sorted(intents.types(invoice_id)) == ["invoice.created", "invoice.processing",
                                                 "invoice.settled"]


def test_ninety_percent_within_a_ten_percent_tolerance_settles(
        pipe: Pipeline, chain: Chain, token: Token, intents: Intents) -> None:
    asset = f"{pipe.network}:{token.address}"
    user, address, invoice = chain_invoice(pipe, asset, Decimal(10), tolerance=Decimal(10))
    tx = token.transfer(address, 9 * 10**token.decimals)
    paid = sent_token(chain, token, tx, address)
    assert paid == Decimal(9)
    pipe.deliver([tx], address, [token])
    chain.finalize(block_of(chain, tx))
    wait_standing(pipe, invoice["invoice_id"], ("settled", None, paid, ZERO))
    assert pipe.balances(user) == {asset: (paid, 0)}
    intents.wait(invoice["invoice_id"], "invoice.settled")


def test_ninety_percent_without_tolerance_is_partial_then_expired_partial(
        pipe: Pipeline, chain: Chain, intents: Intents) -> None:
    user, address, invoice = chain_invoice(pipe, native(pipe), Decimal(1))
    invoice_id = invoice["invoice_id"]
    tx = chain.send_native(address, 9 * WEI // 10)
    paid = sent_native(chain, tx)
    pipe.deliver([tx], address)
    chain.finalize(block_of(chain, tx))
    # Credited before the deadline: new, paid_partial.
    wait_standing(pipe, invoice_id, ("new", "paid_partial", paid, ZERO))
    assert not deadline_passed(pipe, invoice_id)
    # Then the deadline passes (moved to just now: the test need not wait an hour).
    pipe.query("UPDATE invoices SET expires_at = now() WHERE invoice_id = %s"
               " RETURNING invoice_id", (invoice_id,))
    wait_for("the invoice's deadline", lambda: deadline_passed(pipe, invoice_id), 5, 0.1)
    done = subprocess.run(paystream_argv("invoices", "expire"), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    wait_standing(pipe, invoice_id, ("expired", "paid_partial", paid, ZERO))
    assert pipe.balances(user) == {native(pipe): (paid, 0)}
    got = intents.wait(invoice_id, "invoice.paid_partial", "invoice.expired")
    expired = next(i for i in got if i["type"] == "invoice.expired")
    assert expired["data"]["amount_due"] == str((Decimal(1) - paid).normalize())


def test_one_hundred_ten_percent_settles_paid_over(pipe: Pipeline, chain: Chain,
                                                   intents: Intents) -> None:
    user, address, invoice = chain_invoice(pipe, native(pipe), Decimal(1))
    tx = chain.send_native(address, 11 * WEI // 10)
    paid = sent_native(chain, tx)
    pipe.deliver([tx], address)
    chain.finalize(block_of(chain, tx))
    wait_standing(pipe, invoice["invoice_id"], ("settled", "paid_over", paid, ZERO))
    assert pipe.balances(user) == {native(pipe): (paid, 0)}
    intents.wait(invoice["invoice_id"], "invoice.settled")


def test_paid_after_the_deadline_is_late_and_the_user_still_credited(
        pipe: Pipeline, chain: Chain, intents: Intents) -> None:
    user, address, invoice = chain_invoice(pipe, native(pipe), Decimal(1), expires_in_s=1)
    invoice_id = invoice["invoice_id"]
    wait_for("the invoice's deadline", lambda: deadline_passed(pipe, invoice_id), 30, 0.2)
    tx = chain.send_native(address, WEI)
    paid = sent_native(chain, tx)
    pipe.deliver([tx], address)
    chain.finalize(block_of(chain, tx))
    wait_standing(pipe, invoice_id, ("expired", "paid_late", paid, ZERO))
    assert pipe.balances(user) == {native(pipe): (paid, 0)}
    [(state, amount, late)] = payments(pipe, invoice_id).values()
    assert (state, amount, late) == ("credited", paid, True)
    intents.wait(invoice_id, "invoice.paid_late")
    assert "invoice.settled" not in intents.types(invoice_id)


def test_paid_in_two_payments(pipe: Pipeline, chain: Chain, token: Token,
                              intents: Intents) -> None:
    asset = f"{pipe.network}:{token.address}"
    user, address, invoice = chain_invoice(pipe, asset, Decimal(5))
    invoice_id = invoice["invoice_id"]
    first = token.transfer(address, 2 * 10**token.decimals)
    pipe.deliver([first], address, [token])
    chain.finalize(block_of(chain, first))
    one = sent_token(chain, token, first, address)
    wait_standing(pipe, invoice_id, ("new", "paid_partial", one, ZERO))
    second = token.transfer(address, 3 * 10**token.decimals)
    two = sent_token(chain, token, second, address)
    pipe.deliver([second], address, [token])
    wait_standing(pipe, invoice_id, ("processing", None, one, two))
    chain.finalize(block_of(chain, second))
    wait_standing(pipe, invoice_id, ("settled", None, one + two, ZERO))
    assert one + two == Decimal(5)
    assert pipe.balances(user) == {asset: (one + two, 0)}
    assert sorted(p[1] for p in payments(pipe, invoice_id).values()) == sorted([one, two])
    intents.wait(invoice_id, "invoice.paid_partial", "invoice.processing", "invoice.settled")


def test_with_the_webhook_lost_the_scanner_alone_pays_it_at_its_block_time(
        pipe: Pipeline, chain: Chain, intents: Intents) -> None:
    user, address, invoice = chain_invoice(pipe, native(pipe), Decimal(2))
    invoice_id = invoice["invoice_id"]
    tx = chain.send_native(address, 2 * WEI)
    paid = sent_native(chain, tx)
    block = chain.block(block_of(chain, tx))
    chain.finalize(block_of(chain, tx))  # no webhook: only the scanner sees it
    wait_standing(pipe, invoice_id, ("settled", None, paid, ZERO))
    assert pipe.balances(user) == {native(pipe): (paid, 0)}
    [(event_id, provider, seen_at)] = pipe.query(
        "SELECT p.event_id, e.provider, p.seen_at FROM invoice_payments p"
        " JOIN payment_events e USING (event_id) WHERE p.invoice_id = %s", (invoice_id,))
    assert event_id == f"{pipe.network}:{tx}:external" and provider == "scanner"
    assert seen_at == datetime.fromtimestamp(int(block["timestamp"], 16), UTC)
    intents.wait(invoice_id, "invoice.settled")


def test_another_asset_on_an_invoice_address_pays_nothing_but_is_credited(
        pipe: Pipeline, chain: Chain, token: Token) -> None:
    user, address, invoice = chain_invoice(pipe, native(pipe), Decimal(1))
    tx = token.transfer(address, 10**token.decimals)
    pipe.deliver([tx], address, [token])
    chain.finalize(block_of(chain, tx))
    asset = f"{pipe.network}:{token.address}"
    wait_for("the token credited", lambda: pipe.balances(user) == {
        asset: (sent_token(chain, token, tx, address), 0)}, 60)
    assert standing(pipe, invoice["invoice_id"]) == ("new", None, ZERO, ZERO)
    assert payments(pipe, invoice["invoice_id"]) == {}


# --- a settled invoice whose money a reorg takes back --------------------------------------

CREDIT_DEPTH = 2
GRACE = 1  # credit-height blocks a credited tx may stay missing before the reversal


@pytest.fixture(scope="module")
def credit_chain() -> Iterator[Chain]:
    # finalized = head - 8: room for a credit at depth 2 and a reorg before finality.
    try:
        with persisted_anvil(free_port(), slots_in_an_epoch=4) as node:
            yield node
    except AnvilUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def credit_pipe(credit_chain: Chain) -> Iterator[Pipeline]:
    with Pipeline(credit_chain, grace_blocks=GRACE, credit_depth=CREDIT_DEPTH) as p:
        yield p


def test_a_settled_invoice_whose_credited_payment_is_reorged_out_is_invalid(
        credit_pipe: Pipeline, credit_chain: Chain, intents: Intents) -> None:
    pipe, chain = credit_pipe, credit_chain
    user, address, invoice = chain_invoice(pipe, native(pipe), Decimal(1))
    invoice_id = invoice["invoice_id"]
    start = chain.head()
    tx = chain.send_native(address, WEI)
    wait_for("the payment mined", lambda: chain.receipt(tx), timeout=10)
    paid = sent_native(chain, tx)
    pipe.deliver([tx], address)
    deposit_id = f"{pipe.network}:{tx}:external"
    wait_standing(pipe, invoice_id, ("processing", None, ZERO, paid))
    chain.mine(CREDIT_DEPTH)  # credited before finality: the invoice counts it
    wait_standing(pipe, invoice_id, ("settled", None, paid, ZERO))
    assert chain.finalized() < block_of(chain, tx)
    chain.reorg(chain.head() - start)  # the payment's block replaced by empty ones
    assert chain.receipt(tx) is None
    wait_for("the credited payment seen missing", lambda: pipe.query(
        "SELECT missing_since_block FROM chain_deposits WHERE event_id = %s",
        (deposit_id,))[0][0])
    chain.mine(GRACE)
    pipe.wait_states(user, {deposit_id: "reversed"})
    wait_standing(pipe, invoice_id, ("invalid", None, ZERO, ZERO))
    assert payments(pipe, invoice_id) == {deposit_id: ("reversed", paid, False)}
    assert pipe.balances(user) == {native(pipe): (ZERO, 0)}
    assert [h[:2] for h in history(pipe, invoice_id)] == [
        ("new", None), ("processing", None), ("settled", None), ("invalid", None)]
    intents.wait(invoice_id, "invoice.settled", "invoice.invalid")


# --- gateway invoices ----------------------------------------------------------------------

def post_deposit(pipe: Pipeline, body: bytes) -> httpx.Response:
    return httpx.post(pipe.ingest_url + "/webhooks/payments", content=body,
                      headers=payment_headers(body), timeout=10)


def test_a_gateway_invoice_is_paid_by_a_deposit_naming_it(pipe: Pipeline,
                                                         intents: Intents) -> None:
    user, other = "inv-gw-" + uuid.uuid4().hex[:10], "inv-gw-" + uuid.uuid4().hex[:10]
    create_users([user, other])
    invoice = new_invoice(user, "USD", Decimal("40.5"))
    invoice_id = invoice["invoice_id"]
    assert invoice["address"] is None
    # Another user's deposit naming it credits that user, and pays nothing.
    stray = post_deposit(pipe, payment_body("gw-" + uuid.uuid4().hex, other, "40.5",
                                            invoice_id=invoice_id))
    assert stray.status_code == 200, stray.text
    paying_id = "gw-" + uuid.uuid4().hex
    answer = post_deposit(pipe, payment_body(paying_id, user, "40.5", invoice_id=invoice_id))
    assert answer.status_code == 200, answer.text
    wait_standing(pipe, invoice_id, ("settled", None, Decimal("40.5"), ZERO))
    wait_for("the stray deposit credited", lambda: pipe.balances(other) == {
        "USD": (Decimal("40.5"), 0)}, 30)
    assert pipe.balances(user) == {"USD": (Decimal("40.5"), 0)}
    assert payments(pipe, invoice_id) == {paying_id: ("credited", Decimal("40.5"), False)}
    assert history(pipe, invoice_id)[-1] == ("settled", None, f"payment:{paying_id}")
    intents.wait(invoice_id, "invoice.settled")
    refused = post_deposit(pipe, payment_body("gw-" + uuid.uuid4().hex, user, "1",
                                              event_type="airdrop", invoice_id=invoice_id))
    assert refused.status_code == 400 and "invoice_id" in refused.text


# --- reconcile -----------------------------------------------------------------------------

def test_reconcile_fires_on_an_invoice_whose_sums_its_payments_contradict(
        pipe: Pipeline) -> None:
    user = "inv-rec-" + uuid.uuid4().hex[:10]
    create_users([user])
    invoice_id = new_invoice(user, "USD", Decimal(3))["invoice_id"]
    body = payment_body("gw-" + uuid.uuid4().hex, user, "3", invoice_id=invoice_id)
    assert post_deposit(pipe, body).status_code == 200
    wait_standing(pipe, invoice_id, ("settled", None, Decimal(3), ZERO))
    clean = subprocess.run(paystream_argv("reconcile", "--user", user), capture_output=True,
                           text=True, timeout=60)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "1 invoices match their payments" in clean.stdout
    # This test's own invoice, corrupted in a transaction that is rolled back: no other
    # test's reconcile ever sees it. The check runs in that transaction, as reconcile's.
    conn = connect(database_url("owner"))
    try:
        with conn.cursor() as cur:
            cur.execute("UPDATE invoices SET amount_paid = 7 WHERE invoice_id = %s",
                        (invoice_id,))
            cur.execute("UPDATE invoice_payments SET state = 'reversed' WHERE invoice_id = %s",
                        (invoice_id,))
            checked, found = find_invoice_mismatches(cur, [user])
        conn.rollback()
    finally:
        conn.close()
    assert checked == 1 and [(m.invoice_id, m.problems) for m in found] == [
        (invoice_id, ["amount_paid_differs", "settled_unpaid"])]
    report = Report(0, [], "t", features=[invoice_findings(checked, found)])
    assert not report.clean  # `paystream reconcile` exits 1 on it (ops/cli.py)
    assert invoice_id in format_report(report)


def test_refunds_of_an_invoice_payment_take_it_back_from_the_invoice(
        pipe: Pipeline, intents: Intents) -> None:
    # 40 asked, 50 paid (paid_over); a refund of 10 leaves it settled at 40; a chargeback
    # of the other 40 takes the payment back whole: the invoice was settled and is not
    # paid any more, so it is invalid (and its user told).
    user = "inv-refund-" + uuid.uuid4().hex[:10]
    create_users([user])
    invoice = new_invoice(user, "USD", Decimal("40"))
    invoice_id = invoice["invoice_id"]
    paying_id = "gw-" + uuid.uuid4().hex
    paid = post_deposit(pipe, payment_body(paying_id, user, "50", invoice_id=invoice_id))
    assert paid.status_code == 200, paid.text
    wait_standing(pipe, invoice_id, ("settled", "paid_over", Decimal("50"), ZERO))

    refund = post_deposit(pipe, payment_body("gw-" + uuid.uuid4().hex, user, "10",
                                             event_type="refund", reverses=paying_id))
    assert refund.status_code == 200, refund.text
    wait_standing(pipe, invoice_id, ("settled", None, Decimal("40"), ZERO))
    assert payments(pipe, invoice_id) == {paying_id: ("credited", Decimal("50"), False)}

    back = post_deposit(pipe, payment_body("gw-" + uuid.uuid4().hex, user, "40",
                                           event_type="chargeback", reverses=paying_id))
    assert back.status_code == 200, back.text
    wait_standing(pipe, invoice_id, ("invalid", None, ZERO, ZERO))
    assert payments(pipe, invoice_id) == {paying_id: ("reversed", Decimal("50"), False)}
    [(refunded,)] = pipe.query("SELECT refunded FROM invoice_payments WHERE event_id = %s",
                               (paying_id,))
    assert refunded == Decimal("50")
    assert pipe.balances(user) == {"USD": (ZERO, 0)}
    intents.wait(invoice_id, "invoice.created", "invoice.settled", "invoice.invalid")
    # The books and the invoice agree: reconcile's invoice check finds nothing.
    conn = connect(database_url("owner"))
    try:
        with conn, conn.cursor() as cur:
            assert find_invoice_mismatches(cur, [user]) == (1, [])
    finally:
        conn.close()
