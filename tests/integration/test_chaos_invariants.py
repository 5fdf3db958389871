"""The chaos checker itself must catch what it claims to: a checker that cannot fail
would make every chaos report a pass."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal

import pytest

from paystream.chaos import invoices as inv
from paystream.chaos.chain import DROPPED, LATE, ChainDeposit
from paystream.chaos.forgery import FORGED_AMOUNT, Forgery
from paystream.chaos.invariants import (
    InvariantReport,
    chain_report_line,
    check,
    check_chain,
)
from paystream.chaos.notifications import expected_pairs
from paystream.chaos.traffic import Kind, Request
from paystream.invoices import matching
from paystream.notify.intents import now_text
from paystream.schema.db import Connection, connect, database_url
from paystream.schema.events import EventType, PaymentEvent
from paystream.schema.idempotency import idempotency_key
from paystream.schema.processed_events import Outcome
from tests.support.ids import unique
from tests.support.ledger import plant_transfer


@pytest.fixture
def db() -> Iterator[Connection]:
    """The books each test plants are its own: one transaction, rolled back at its end
    (the checks read them in it), so the shared stack's ledger still reconciles for the
    tests after it (the restore drill reconciles it whole, tests/integration/
    test_db_backups.py)."""
    conn = connect(database_url("owner"), application_name="paystream-test-chaos-checks")
    try:
        yield conn
    finally:
        conn.rollback()
        conn.close()


def _request(kind: Kind, event_id: str, user: str, amount: str = "5", status: int = 200,
             answer: str = "accepted") -> Request:
    return Request(kind, event_id, "deposit", user, "USD", amount, b"{}", "msg_x",
                   status=status, answer=answer, answered_seq=1)


def _applied_deposit(cur, event_id: str, user: str, amount: str, *, journal_user: str,
                     journal_asset: str = "USD") -> None:
    """A deposit stored and applied, its journal row written under `journal_user`."""
    cur.execute("INSERT INTO users (user_id) VALUES (%s), (%s) ON CONFLICT DO NOTHING",
                (user, journal_user))
    cur.execute("INSERT INTO payment_events (event_id, provider, event_type, user_id, asset,"
                " amount, content_hash, trace_id, payload) VALUES (%s, 'payments',"
                " 'deposit', %s, 'USD', %s, 'h', 't', '{}');"
                " INSERT INTO event_status (event_id, status) VALUES (%s, 'applied')",
                (event_id, user, amount, event_id))
    cur.execute("INSERT INTO processed_events (idempotency_key, event_id, event_type,"
                " outcome) VALUES (%s, %s, 'deposit', 'applied')",
                (idempotency_key(event_id, "deposit"), event_id))
    cur.execute("INSERT INTO balances (user_id, asset, balance) VALUES (%s, %s, %s)"
                " ON CONFLICT (user_id, asset) DO UPDATE SET balance ="
                " balances.balance + EXCLUDED.balance", (journal_user, journal_asset, amount))
    plant_transfer(cur, event_id, "deposit", journal_user, journal_asset, Decimal(amount))


def test_an_accepted_event_missing_from_the_database_is_reported_lost(db):
    with db.cursor() as cur:
        verdict = check(cur, [_request(Kind.DEPOSIT, unique("chaos-t-e"), unique("u"))], [])
    assert len(verdict.lost) == 1
    assert not verdict.passed


def test_a_balance_that_differs_from_its_journal_is_a_violation(db):
    user = unique("u")
    with db.cursor() as cur:
        cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
        cur.execute("INSERT INTO balances (user_id, asset, balance) VALUES (%s, 'USD', 7)",
                    (user,))
        plant_transfer(cur, unique("e"), "deposit", user, "USD", Decimal(5))
        verdict = check(cur, [], [user])
    assert any(f"{user}/USD = 7" in v for v in verdict.violations)


def test_a_written_invalid_request_and_a_non_duplicate_redelivery_are_violations(db):
    event_id = unique("chaos-t-e")
    with db.cursor() as cur:
        cur.execute("INSERT INTO payment_events (event_id, provider, event_type, user_id, asset,"
                    " amount, content_hash, trace_id, payload) VALUES"
                    " (%s, 'payments', 'deposit', 'u', 'USD', 5, 'h', 't', '{}')", (event_id,))
        sent = [_request(Kind.INVALID, event_id, "u", status=400, answer="invalid"),
                _request(Kind.REDELIVERY, unique("chaos-t-e"), "u", answer="accepted")]
        verdict = check(cur, sent, [])
    assert any("was written" in v for v in verdict.violations)
    assert any(v.startswith("redelivery") for v in verdict.violations)


def test_a_deposit_the_ingest_refused_is_a_violation(db):
    with db.cursor() as cur:
        verdict = check(cur, [_request(Kind.DEPOSIT, unique("chaos-t-e"), unique("u"),
                                       status=400, answer="unsupported_asset")], [])
    assert any("answered 400 unsupported_asset" in v for v in verdict.violations)


def test_an_applied_deposit_journaled_under_another_user_is_a_violation(db):
    """The journal row sums right (balance = journal) but is someone else's money."""
    user, other, event_id = unique("u"), unique("u"), unique("chaos-t-e")
    with db.cursor() as cur:
        _applied_deposit(cur, event_id, user, "5", journal_user=other)
        verdict = check(cur, [_request(Kind.DEPOSIT, event_id, user)], [user, other])
    assert any(f"{event_id}: applied with available entries" in v for v in verdict.violations)
    # Both balances also disagree with the sender's record: 0 vs 5 and 5 vs 0.
    assert any(f"balance {user}/USD = 0, the sender's record says 5" in v
               for v in verdict.violations)
    assert any(f"balance {other}/USD = 5" in v for v in verdict.violations)


def test_a_correct_applied_deposit_passes(db):
    user, event_id = unique("u"), unique("chaos-t-e")
    with db.cursor() as cur:
        _applied_deposit(cur, event_id, user, "5", journal_user=user)
        verdict = check(cur, [_request(Kind.DEPOSIT, event_id, user)], [user])
    assert verdict.passed, verdict


def test_a_forged_record_that_was_credited_is_a_violation(db):
    user, forged_id = unique("u"), unique("chaos-t-forged")
    with db.cursor() as cur:
        _applied_deposit(cur, forged_id, user, str(FORGED_AMOUNT), journal_user=user)
        verdict = check(cur, [], [user], [Forgery("unknown", forged_id, user,
                                                  FORGED_AMOUNT)])
    assert any(f"forged {forged_id} was credited" in v for v in verdict.violations)
    assert any(f"forged {forged_id}: dead letters None" in v for v in verdict.violations)
    assert any(f"balance {user}/USD = {FORGED_AMOUNT}" in v for v in verdict.violations)


# --- deposits for users nobody created (the poison in the mix, the flood) --------------

def _ghost_event(cur, event_id: str, user: str, *, status: str, outcome: str) -> None:
    """A deposit for `user` (never created) the ingest let in, and how the ledger ended it."""
    cur.execute("INSERT INTO payment_events (event_id, provider, event_type, user_id, asset,"
                " amount, content_hash, trace_id, payload) VALUES (%s, 'payments',"
                " 'deposit', %s, 'USD', 5, 'h', 't', '{}');"
                " INSERT INTO event_status (event_id, status) VALUES (%s, %s)",
                (event_id, user, event_id, status))
    cur.execute("INSERT INTO processed_events (idempotency_key, event_id, event_type,"
                " outcome) VALUES (%s, %s, 'deposit', %s)",
                (idempotency_key(event_id, "deposit"), event_id, outcome))


def test_unknown_user_deposits_refused_or_rejected_pass(db):
    refused = _request(Kind.FLOOD, unique("chaos-t-e"), unique("ghost"), status=422,
                       answer="unknown_user")
    let_in = _request(Kind.POISON, unique("chaos-t-e"), unique("ghost"))
    with db.cursor() as cur:
        _ghost_event(cur, let_in.event_id, let_in.user_id, status="rejected",
                     outcome="unknown_user")
        verdict = check(cur, [refused, let_in], [])
    assert verdict.passed, verdict
    assert verdict.outcomes["refused_unknown_user"] == 1
    assert verdict.outcomes["unknown_user"] == 1


def test_an_unknown_user_deposit_credited_or_refused_otherwise_is_a_violation(db):
    credited = _request(Kind.FLOOD, unique("chaos-t-e"), unique("ghost"))
    other = _request(Kind.FLOOD, unique("chaos-t-e"), unique("ghost"), status=400,
                     answer="invalid_body")
    with db.cursor() as cur:
        _applied_deposit(cur, credited.event_id, credited.user_id, "5",
                         journal_user=credited.user_id)
        verdict = check(cur, [credited, other], [])
    found = "\n".join(verdict.violations)
    assert f"{credited.event_id} for unknown user {credited.user_id} accepted, then " \
        "applied/applied" in found
    assert f"{credited.event_id} for unknown user was credited" in found
    assert f"unknown user {credited.user_id} has a balance" in found
    assert f"{other.event_id} for unknown user answered 400 invalid_body" in found


def test_an_unknown_user_deposit_dead_lettered_is_a_violation(db):
    """A dead letter counts against the ledger's DLQ limit: a flood of them stopped it."""
    # An event id of a run of its own: the checker reads the dead letters of the run's
    # id prefix, and this one stays in the table for good.
    ghost = _request(Kind.FLOOD, f"{unique('chaos-dl')}-e1", unique("ghost"))
    with db.cursor() as cur:
        cur.execute("INSERT INTO payment_events (event_id, provider, event_type, user_id,"
                    " asset, amount, content_hash, trace_id, payload) VALUES (%s,"
                    " 'payments', 'deposit', %s, 'USD', 5, 'h', 't', '{}');"
                    " INSERT INTO event_status (event_id, status) VALUES (%s, 'dead_lettered')",
                    (ghost.event_id, ghost.user_id, ghost.event_id))
        cur.execute("INSERT INTO dead_letter_queue (source_topic, source_partition,"
                    " source_offset, event_id, error_reason, error_detail) VALUES"
                    " ('chaos-t', 0, (SELECT coalesce(max(source_offset), 0) + 1 FROM"
                    " dead_letter_queue WHERE source_topic = 'chaos-t'), %s,"
                    " 'unknown_user', 'no such user')", (ghost.event_id,))
        verdict = check(cur, [ghost], [])
    found = "\n".join(verdict.violations)
    assert f"{ghost.event_id} for unknown user {ghost.user_id} accepted, then " \
        "dead_lettered/None" in found
    assert "1 events dead-lettered that were not forged records" in found


# --- chain deposits: the chain's answer is the checker's input, the books are real ----

BLOCK_HASH = "0x" + "ab" * 32


def _chain_deposit(cur, *, state: str, status: str, credits: list[str]) -> ChainDeposit:
    """One chain deposit planted in the real tables, in the given end state."""
    user, tx = unique("u"), "0x" + uuid.uuid4().hex * 2
    event_id = f"CHAOS_T:{tx}:external"
    d = ChainDeposit(tx, user, "0x" + "11" * 20, 10**17, 7, event_id=event_id, status=200)
    cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    cur.execute("INSERT INTO balances (user_id, asset, balance) VALUES (%s, 'CHAOS_T:native', %s)",
                (user, d.amount * len(credits)))
    cur.execute("INSERT INTO payment_events (event_id, provider, event_type, user_id, asset,"
                " amount, content_hash, trace_id, payload) VALUES"
                " (%s, 'alchemy', 'deposit', %s, 'CHAOS_T:native', %s, 'h', 't', '{}');"
                " INSERT INTO event_status (event_id, status) VALUES (%s, %s)",
                (event_id, user, d.amount, event_id, status))
    cur.execute("INSERT INTO chain_deposits (event_id, network, tx_hash, block_number,"
                " recipient, raw_value, chain, user_id, asset, amount, trace_id, state,"
                " final_block_hash) VALUES (%s, 'CHAOS_T', %s, 7, %s, %s, '{}', %s,"
                " 'CHAOS_T:native', %s, 't', %s, %s)",
                (event_id, tx, d.address, d.wei, user, d.amount, state,
                 BLOCK_HASH if state == "final" else None))
    for source in credits:
        plant_transfer(cur, source.format(event_id), "deposit_finalized", user,
                       "CHAOS_T:native", d.amount)
    return d


def _on_chain(receipt_status: str = "0x1"):
    return lambda tx: {"status": receipt_status, "blockHash": BLOCK_HASH}


def test_chain_deposits_settled_as_the_chain_says_pass(db):
    with db.cursor() as cur:
        good = _chain_deposit(cur, state="final", status="applied",
                              credits=["{}:finalized"])
        verdict = InvariantReport()
        check_chain(cur, verdict, [good], _on_chain())
        dropped = _chain_deposit(cur, state="reorged", status="reorged", credits=[])
        check_chain(cur, verdict, [dropped], lambda tx: None)
    assert verdict.passed, verdict
    assert verdict.outcomes == {"chain_final": 1, "chain_reorged": 1}


def test_a_deposit_on_chain_but_never_credited_is_lost(db):
    with db.cursor() as cur:
        d = _chain_deposit(cur, state="reorged", status="reorged", credits=[])
        verdict = InvariantReport()
        check_chain(cur, verdict, [d], _on_chain())
    assert len(verdict.lost) == 1 and "on chain but reorged" in verdict.lost[0]


def test_a_credited_deposit_the_chain_does_not_have_is_a_violation(db):
    with db.cursor() as cur:
        d = _chain_deposit(cur, state="final", status="applied", credits=["{}:finalized"])
        verdict = InvariantReport()
        check_chain(cur, verdict, [d], lambda tx: None)
    assert any("not on chain but final" in v for v in verdict.violations)


def test_a_deposit_credited_twice_is_double_applied(db):
    with db.cursor() as cur:
        d = _chain_deposit(cur, state="final", status="applied",
                           credits=["{}:finalized", "{}"])
        verdict = InvariantReport()
        check_chain(cur, verdict, [d], _on_chain())
    assert len(verdict.double_applied) == 1


def test_an_accepted_deposit_the_ledger_never_held_is_lost(db):
    d = ChainDeposit("0xfeed", unique("u"), "0x" + "22" * 20, 10**15, 3,
                     event_id=unique("CHAOS_T:0xfeed:external"), status=200)
    with db.cursor() as cur:
        verdict = InvariantReport()
        check_chain(cur, verdict, [d], _on_chain())
    assert len(verdict.lost) == 1 and "never held" in verdict.lost[0]


def _unsent(webhook: str) -> ChainDeposit:
    """A transfer the run sent on chain and whose webhook it held back."""
    tx = "0x" + uuid.uuid4().hex * 2
    return ChainDeposit(tx, unique("u"), "0x" + "33" * 20, 10**15, 5,
                        event_id=f"CHAOS_T:{tx}:external", webhook=webhook)


def test_a_transfer_on_chain_with_no_webhook_and_no_scan_is_lost(db):
    d = _unsent(DROPPED)
    with db.cursor() as cur:
        verdict = InvariantReport()
        check_chain(cur, verdict, [d], _on_chain())
    assert len(verdict.lost) == 1 and "(webhook dropped), on chain, never held" in verdict.lost[0]
    assert "on chain: 1 (webhook dropped: 1, sent late: 0), credited once: 0, twice: 0, " \
        "missing: 1" in chain_report_line(verdict)


def test_a_transfer_with_no_webhook_that_a_reorg_removed_need_not_be_recorded(db):
    with db.cursor() as cur:
        verdict = InvariantReport()
        check_chain(cur, verdict, [_unsent(DROPPED)], lambda tx: None)
    assert verdict.passed, verdict
    assert "on chain: 0 (" in chain_report_line(verdict)


def test_a_late_webhook_not_answered_duplicate_is_a_violation(db):
    with db.cursor() as cur:
        d = _chain_deposit(cur, state="final", status="applied", credits=["{}:finalized"])
        d.status, d.webhook, d.late_answer = None, LATE, "200:accepted"
        verdict = InvariantReport()
        check_chain(cur, verdict, [d], _on_chain())
    assert any("answered 200:accepted, not 200 duplicate" in v for v in verdict.violations)
    assert "credited once with no webhook: 0, before their late webhook: 1" in \
        chain_report_line(verdict)


def test_an_ingest_naming_a_transfer_otherwise_than_the_scanner_is_a_violation(db):
    with db.cursor() as cur:
        d = _chain_deposit(cur, state="final", status="applied", credits=["{}:finalized"])
        d.answered_id = d.event_id + "x"
        verdict = InvariantReport()
        check_chain(cur, verdict, [d], _on_chain())
    assert any("the ingest named it" in v for v in verdict.violations)


# --- invoices: the sender's accepted payments against the invoice tables -----------------

def _invoice(cur, plan: inv.Plan, amount: str, payments: tuple[str, ...],
             tolerance: str = "0") -> inv.ChaosInvoice:
    """One of a run's invoices, created by the API's creation function."""
    user = unique("u")
    cur.execute("INSERT INTO users (user_id) VALUES (%s)", (user,))
    invoice = inv.ChaosInvoice(user, "USD", Decimal(amount), Decimal(tolerance), plan,
                               tuple(Decimal(p) for p in payments))
    inv.create_all(cur, [invoice], "t", now_text())
    return invoice


def _paid(cur, invoice: inv.ChaosInvoice, amount: str, *, status: int | None = 200
          ) -> Request:
    """A payment the ledger matched (invoices/matching.py, as in the batch's transaction),
    and the sender's record of its request (answered `status`)."""
    event_id = unique("chaos-t-e")
    event = PaymentEvent(event_id, EventType.DEPOSIT, invoice.user_id, "USD", Decimal(amount),
                         "payments", invoice_id=invoice.invoice_id)
    matching.match(cur, [(None, event, Outcome.APPLIED)], now_text())
    return Request(Kind.INVOICE_PAYMENT, event_id, "deposit", invoice.user_id, "USD", amount,
                   b"{}", "msg_x", status=status, answer="accepted", answered_seq=1,
                   invoice_id=invoice.invoice_id)


def test_invoices_paid_as_the_sender_record_says_pass(db):
    with db.cursor() as cur:
        full = _invoice(cur, inv.Plan.FULL, "40", ("39.5",), tolerance="2.5")
        over = _invoice(cur, inv.Plan.OVER, "40", ("41.01",), tolerance="2.5")
        two = _invoice(cur, inv.Plan.TWO_PARTIALS, "40", ("10", "29.99"))
        unpaid = _invoice(cur, inv.Plan.UNPAID, "40", ())
        sent = [_paid(cur, full, "39.5"), _paid(cur, over, "41.01"),
                _paid(cur, two, "29.99"), _paid(cur, two, "10")]
        verdict = InvariantReport()
        inv.check_invoices(cur, verdict, [full, over, two, unpaid], sent)
    assert verdict.passed, verdict
    assert "4 created, 4 payments accepted; expected from the sender's record: settled=1," \
        " settled/paid_over=1, new/paid_partial=1, new=1; invoice violations = 0" in \
        inv.report_line(verdict)


def test_an_accepted_payment_the_invoice_never_got_and_one_nobody_sent_are_caught(db):
    with db.cursor() as cur:
        missed = _invoice(cur, inv.Plan.FULL, "25", ("25",))
        stray = _invoice(cur, inv.Plan.PARTIAL, "25", ("5",))
        never_matched = Request(Kind.INVOICE_PAYMENT, unique("chaos-t-e"), "deposit",
                                missed.user_id, "USD", "25", b"{}", "msg_x", status=200,
                                answered_seq=1, invoice_id=missed.invoice_id)
        unanswered = _paid(cur, stray, "5", status=None)
        verdict = InvariantReport()
        inv.check_invoices(cur, verdict, [missed, stray], [never_matched, unanswered])
    found = "\n".join(verdict.violations + verdict.lost)
    assert f"payment {never_matched.event_id} has no invoice_payments row" in found
    assert f"invoice {missed.invoice_id} (full, 25 USD tolerance 0 %, paid ['25']): new/None" \
        " paid" in found
    assert "want settled paid 25 pending 0" in found
    assert f"invoice payment {unanswered.event_id} of {stray.invoice_id}: no accepted" in found
    # And each invoice's standing and history disagree with the sender's record.
    assert verdict.invoices["violations"] == 6
    assert not verdict.passed


def test_the_invoice_intents_expected_follow_the_accepted_payments_alone():
    """Created for each; settled for a settling sum; paid_partial per partial payment,
    whatever order they came in; nothing for a payment the ingest never accepted."""
    def invoice(plan: inv.Plan, n: int) -> inv.ChaosInvoice:
        return inv.ChaosInvoice("u1", "USD", Decimal(100), Decimal(0), plan, (),
                                invoice_id=f"inv_{n}")

    def pay(n: int, invoice_id: str, amount: str, status: int | None = 200) -> Request:
        return Request(Kind.INVOICE_PAYMENT, f"e{n}", "deposit", "u1", "USD", amount, b"{}",
                       "msg_x", status=status, answered_seq=n, invoice_id=invoice_id)

    invoices = [invoice(inv.Plan.FULL, 1), invoice(inv.Plan.OVER, 2),
                invoice(inv.Plan.TWO_PARTIALS, 3), invoice(inv.Plan.FULL, 4),
                invoice(inv.Plan.UNPAID, 5)]
    accepted = [pay(1, "inv_1", "100"), pay(2, "inv_2", "120"), pay(4, "inv_3", "30"),
                pay(3, "inv_3", "60")]
    pairs = expected_pairs(accepted, {r.event_id: "applied" for r in accepted}, [],
                           lambda tx: None, invoices)
    assert pairs == {(f"inv_{n}", "invoice.created") for n in range(1, 6)} | {
        ("inv_1", "invoice.settled"), ("inv_2", "invoice.settled"),
        ("e3", "invoice.paid_partial"), ("e4", "invoice.paid_partial"),
        *((f"e{n}", "deposit.credited") for n in range(1, 5))}
