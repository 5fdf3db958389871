"""Payments matched to invoices (invoices/matching.py), in memory: what a batch asks the
database for (nothing without deposits), what each decision does to an invoice's
payments, sums and standing, replays, payments that pay no invoice, the time a payment
counts at; and the `invoice_id` a gateway deposit carries (schema/events.py, ingest)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from paystream.finality.scanner.blocks import block_time, native_transfers
from paystream.ingest.errors import PayloadError
from paystream.ingest.payments import parse_payment
from paystream.invoices.matching import (
    InvoiceBook,
    Lookup,
    PaymentState,
    lookup,
    match,
    seen_at,
)
from paystream.invoices.model import Invoice
from paystream.invoices.rules import Additional, State
from paystream.schema.chain import scanned_same_transfer
from paystream.schema.events import (
    EventError,
    EventType,
    PaymentEvent,
    SettlementType,
    parse_wire,
)
from paystream.schema.processed_events import Outcome

D = Decimal
NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)
NET = "ANVIL_UNIT"
ADDRESS = "0x" + "ab" * 20
ASSET = f"{NET}:native"
INV = "inv_" + "1" * 32
GATEWAY_INV = "inv_" + "2" * 32


def invoice(invoice_id: str = INV, *, amount: str = "100", tolerance: str = "0",
            address: str | None = ADDRESS, asset: str = ASSET, user: str = "u1",
            expires_at: datetime = NOW + timedelta(hours=1),
            state: State = State.NEW) -> Invoice:
    return Invoice(invoice_id, user, asset, D(amount), D(tolerance), None, {},
                   NET if address else None, address, expires_at, state, None, D(0), D(0),
                   NOW - timedelta(hours=1), NOW - timedelta(hours=1))


def chain_deposit(event_id: str, amount: str, *, to: str = ADDRESS, asset: str = ASSET,
                  occurred_at: str | None = None, user: str = "u1") -> PaymentEvent:
    return PaymentEvent(event_id, EventType.DEPOSIT, user, asset, D(amount), "alchemy",
                        occurred_at, {"network": NET, "recipient": to.upper()[:2].lower()
                                      + to[2:].upper()})


def settlement(kind: SettlementType, deposit: PaymentEvent) -> PaymentEvent:
    suffix = kind.value.removeprefix("deposit_")
    return PaymentEvent(f"{deposit.event_id}:{suffix}", kind, deposit.user_id, deposit.asset,
                        deposit.amount, "finality", None,
                        {"deposit_event_id": deposit.event_id})


def gateway_deposit(event_id: str, amount: str, invoice_id: str | None = GATEWAY_INV,
                    *, user: str = "u1", asset: str = "USD") -> PaymentEvent:
    return PaymentEvent(event_id, EventType.DEPOSIT, user, asset, D(amount), "payments",
                        invoice_id=invoice_id)


def book(*invoices: Invoice) -> InvoiceBook:
    return InvoiceBook(NOW, {i.invoice_id: i for i in invoices})


def standing_of(ledger: InvoiceBook, invoice_id: str = INV) -> tuple[State, Additional | None,
                                                               Decimal, Decimal]:
    i = ledger.invoices[invoice_id]
    return i.state, i.additional, i.amount_paid, i.amount_pending


# --- what a batch asks for ----------------------------------------------------------------

def test_a_batch_without_deposits_or_settlements_asks_nothing() -> None:
    withdrawal = PaymentEvent("w1", EventType.WITHDRAWAL, "u1", "USD", D(1), "payments")
    plain = gateway_deposit("d1", "5", None)
    assert not lookup([(withdrawal, Outcome.APPLIED), (plain, Outcome.APPLIED)])
    assert not lookup([])


def test_a_batch_asks_for_addresses_named_invoices_and_settled_deposits() -> None:
    deposit = chain_deposit("c1", "1")
    wanted = lookup([(deposit, Outcome.PENDING_FINALITY),
                     (gateway_deposit("g1", "1"), Outcome.APPLIED),
                     (settlement(SettlementType.DEPOSIT_FINALIZED, deposit), Outcome.APPLIED),
                     (gateway_deposit("g2", "1", "inv_" + "3" * 32), Outcome.UNKNOWN_USER)])
    assert wanted == Lookup(((NET, ADDRESS),), (GATEWAY_INV,), ("c1",))


# --- chain invoices ------------------------------------------------------------------------

def test_a_chain_payment_is_pending_then_credited_once() -> None:
    ledger = book(invoice())
    deposit = chain_deposit("c1", "100")
    [seen] = ledger.apply(deposit, Outcome.PENDING_FINALITY)
    assert (seen.before.state, seen.after.state) == (State.NEW, State.PROCESSING)
    assert standing_of(ledger) == (State.PROCESSING, None, D(0), D(100))
    assert ledger.payments["c1"].state is PaymentState.PENDING
    [credited] = ledger.apply(settlement(SettlementType.DEPOSIT_FINALIZED, deposit),
                              Outcome.APPLIED)
    assert credited.payment_event_id == "c1" and credited.event_id == "c1:finalized"
    assert standing_of(ledger) == (State.SETTLED, None, D(100), D(0))
    # A second verdict, a replay of the deposit: nothing more.
    assert ledger.apply(settlement(SettlementType.DEPOSIT_CREDITED, deposit),
                        Outcome.CREDITED) == []
    assert ledger.apply(deposit, Outcome.PENDING_FINALITY) == []
    assert standing_of(ledger) == (State.SETTLED, None, D(100), D(0))
    assert len(ledger.changes) == 2


def test_credited_before_finality_counts_at_the_credit_not_again_at_finality() -> None:
    ledger = book(invoice())
    deposit = chain_deposit("c1", "100")
    ledger.apply(deposit, Outcome.PENDING_FINALITY)
    assert ledger.apply(settlement(SettlementType.DEPOSIT_CREDITED, deposit),
                        Outcome.CREDITED)
    finalized = settlement(SettlementType.DEPOSIT_FINALIZED, deposit)
    assert ledger.apply(finalized, Outcome.APPLIED) == []
    assert standing_of(ledger) == (State.SETTLED, None, D(100), D(0))


def test_two_payments_partial_then_settled() -> None:
    ledger = book(invoice())
    first, second = chain_deposit("c1", "60"), chain_deposit("c2", "40")
    ledger.apply(first, Outcome.PENDING_FINALITY)
    ledger.apply(settlement(SettlementType.DEPOSIT_FINALIZED, first), Outcome.APPLIED)
    assert standing_of(ledger) == (State.NEW, Additional.PAID_PARTIAL, D(60), D(0))
    ledger.apply(second, Outcome.PENDING_FINALITY)
    assert standing_of(ledger) == (State.PROCESSING, None, D(60), D(40))
    ledger.apply(settlement(SettlementType.DEPOSIT_FINALIZED, second), Outcome.APPLIED)
    assert standing_of(ledger) == (State.SETTLED, None, D(100), D(0))


def test_a_reorged_payment_leaves_the_invoice_as_before() -> None:
    ledger = book(invoice())
    deposit = chain_deposit("c1", "100")
    ledger.apply(deposit, Outcome.PENDING_FINALITY)
    ledger.apply(settlement(SettlementType.DEPOSIT_REORGED, deposit), Outcome.REORGED)
    assert standing_of(ledger) == (State.NEW, None, D(0), D(0))
    assert ledger.payments["c1"].state is PaymentState.REORGED


@pytest.mark.parametrize("outcome", [Outcome.APPLIED, Outcome.SHORTFALL])
def test_a_settled_invoice_whose_payment_is_reversed_is_invalid(outcome: Outcome) -> None:
    ledger = book(invoice())
    deposit = chain_deposit("c1", "100")
    ledger.apply(deposit, Outcome.PENDING_FINALITY)
    ledger.apply(settlement(SettlementType.DEPOSIT_CREDITED, deposit), Outcome.CREDITED)
    [reversed_] = ledger.apply(settlement(SettlementType.DEPOSIT_REVERSED, deposit), outcome)
    assert reversed_.before.state is State.SETTLED
    assert standing_of(ledger) == (State.INVALID, None, D(0), D(0))
    assert ledger.payments["c1"].state is PaymentState.REVERSED


def test_another_asset_on_the_invoice_address_pays_nothing() -> None:
    ledger = book(invoice())
    token = chain_deposit("c1", "100", asset=f"{NET}:0x" + "cd" * 20)
    assert ledger.apply(token, Outcome.PENDING_FINALITY) == []
    assert ledger.payments == {} and standing_of(ledger) == (State.NEW, None, D(0), D(0))


def test_a_payment_after_the_deadline_is_late_and_an_on_time_one_wins_over_expiry() -> None:
    expired = invoice(expires_at=NOW - timedelta(minutes=5), state=State.EXPIRED)
    ledger = book(expired)
    late = chain_deposit("c1", "100", occurred_at=(NOW - timedelta(minutes=1)).isoformat())
    ledger.apply(late, Outcome.PENDING_FINALITY)
    assert ledger.payments["c1"].late
    assert standing_of(ledger) == (State.EXPIRED, None, D(0), D(100))
    ledger.apply(settlement(SettlementType.DEPOSIT_FINALIZED, late), Outcome.APPLIED)
    assert standing_of(ledger) == (State.EXPIRED, Additional.PAID_LATE, D(100), D(0))

    ledger = book(expired)
    on_time = chain_deposit("c2", "100",
                            occurred_at=(NOW - timedelta(minutes=6)).isoformat())
    ledger.apply(on_time, Outcome.PENDING_FINALITY)
    assert not ledger.payments["c2"].late
    assert standing_of(ledger) == (State.PROCESSING, None, D(0), D(100))
    ledger.apply(settlement(SettlementType.DEPOSIT_FINALIZED, on_time), Outcome.APPLIED)
    assert standing_of(ledger) == (State.SETTLED, None, D(100), D(0))


def test_seen_at_is_occurred_at_capped_at_now_else_now() -> None:
    def at(occurred: str | None) -> datetime:
        return seen_at(chain_deposit("c", "1", occurred_at=occurred), NOW)

    assert at(None) == NOW
    assert at("2026-06-01T11:00:00Z") == NOW - timedelta(hours=1)
    assert at("2026-06-01T11:00:00") == NOW - timedelta(hours=1)  # naive: UTC
    assert at("2026-06-01T13:00:00+00:00") == NOW  # a clock ahead of ours: now
    assert at("yesterday") == NOW


# --- gateway invoices ----------------------------------------------------------------------

def gateway_invoice(**kwargs: object) -> Invoice:
    return invoice(GATEWAY_INV, address=None, asset="USD", **kwargs)  # type: ignore[arg-type]


def test_a_gateway_deposit_naming_its_invoice_is_credited_at_once() -> None:
    ledger = book(gateway_invoice())
    [change] = ledger.apply(gateway_deposit("g1", "100"), Outcome.APPLIED)
    assert change.after.state is State.SETTLED
    assert standing_of(ledger, GATEWAY_INV) == (State.SETTLED, None, D(100), D(0))
    assert ledger.payments["g1"].state is PaymentState.CREDITED
    assert ledger.apply(gateway_deposit("g1", "100"), Outcome.APPLIED) == []  # replay


def refund(event_id: str, amount: str, reverses: str,
           kind: EventType = EventType.REFUND) -> PaymentEvent:
    return PaymentEvent(event_id, kind, "u1", "USD", D(amount), "payments",
                        reference=reverses)


def test_refunds_take_back_what_they_refund_and_the_last_one_the_payment() -> None:
    ledger = book(gateway_invoice())
    ledger.apply(gateway_deposit("g1", "120"), Outcome.APPLIED)
    assert standing_of(ledger, GATEWAY_INV) == (State.SETTLED, Additional.PAID_OVER,
                                                D(120), D(0))
    wanted = lookup([(refund("r0", "1", "g1"), Outcome.APPLIED),
                     (refund("r9", "1", "g9"), Outcome.EXCEEDS_ORIGINAL)])
    assert wanted == Lookup((), (), ("g1",))  # a refused refund asks for nothing
    [change] = ledger.apply(refund("r1", "20", "g1"), Outcome.APPLIED)
    assert (change.before.additional, change.after.additional) == (Additional.PAID_OVER,
                                                                   None)
    assert standing_of(ledger, GATEWAY_INV) == (State.SETTLED, None, D(100), D(0))
    # Below the amount: was settled, is not paid any more.
    ledger.apply(refund("r2", "30", "g1", EventType.CHARGEBACK), Outcome.SHORTFALL)
    assert standing_of(ledger, GATEWAY_INV) == (State.INVALID, Additional.PAID_PARTIAL,
                                                D(70), D(0))
    ledger.apply(refund("r2b", "10", "g1"), Outcome.APPLIED)  # still partly paid
    assert standing_of(ledger, GATEWAY_INV) == (State.INVALID, Additional.PAID_PARTIAL,
                                                D(60), D(0))
    assert (ledger.payments["g1"].state, ledger.payments["g1"].refunded) == (
        PaymentState.CREDITED, D(60))
    ledger.apply(refund("r3", "60", "g1", EventType.REVERT), Outcome.APPLIED)
    assert ledger.payments["g1"].state is PaymentState.REVERSED
    assert standing_of(ledger, GATEWAY_INV) == (State.INVALID, None, D(0), D(0))
    # A refund of a payment taken back whole, or refused by the ledger, changes nothing.
    assert ledger.apply(refund("r4", "1", "g1"), Outcome.APPLIED) == []
    assert ledger.apply(refund("r5", "1", "g1"), Outcome.EXCEEDS_ORIGINAL) == []


@pytest.mark.parametrize("deposit", [
    gateway_deposit("g1", "100", user="u2"),                 # another user's invoice
    gateway_deposit("g1", "100", asset="EUR"),               # another asset
    gateway_deposit("g1", "100", "inv_" + "9" * 32),         # no such invoice
    PaymentEvent("g1", EventType.DEPOSIT, "u1", ASSET, D(100), "payments",
                 invoice_id=INV),                            # a chain invoice
])
def test_a_gateway_deposit_that_cannot_pay_its_invoice_leaves_it(deposit: PaymentEvent
                                                                 ) -> None:
    ledger = book(gateway_invoice(), invoice())
    assert ledger.apply(deposit, Outcome.APPLIED) == []
    assert ledger.payments == {}
    assert standing_of(ledger, GATEWAY_INV) == (State.NEW, None, D(0), D(0))


def test_a_refused_or_unknown_users_deposit_pays_nothing() -> None:
    ledger = book(gateway_invoice())
    assert ledger.apply(gateway_deposit("g1", "100"), Outcome.UNKNOWN_USER) == []
    assert ledger.payments == {}


# --- the wire: invoice_id on a deposit only ------------------------------------------------

def test_invoice_id_travels_on_the_wire_and_changes_nothing_when_absent() -> None:
    event = gateway_deposit("g1", "100")
    wire = event.to_wire()
    assert wire["invoice_id"] == GATEWAY_INV
    assert parse_wire(wire) == event
    plain = gateway_deposit("g1", "100", None)
    assert "invoice_id" not in plain.to_wire()
    assert plain.content_hash() != event.content_hash()


@pytest.mark.parametrize(("change", "reason"), [
    ({"invoice_id": "inv_XYZ"}, "invalid format"),
    ({"invoice_id": 7}, "must be a string"),
    ({"event_type": "withdrawal"}, "only for deposits"),
])
def test_a_wire_invoice_id_must_be_well_formed_and_on_a_deposit(change: dict, reason: str
                                                                 ) -> None:
    wire = {**gateway_deposit("g1", "100").to_wire(), **change}
    with pytest.raises(EventError, match=reason):
        parse_wire(wire)


def test_the_gateway_accepts_invoice_id_on_a_deposit_only() -> None:
    body = {"event_id": "g1", "event_type": "deposit", "user_id": "u1", "amount": "5",
            "invoice_id": GATEWAY_INV}
    assert parse_payment(body, "USD").invoice_id == GATEWAY_INV
    with pytest.raises(PayloadError, match="only for deposit"):
        parse_payment({**body, "event_type": "airdrop"}, "USD")
    with pytest.raises(PayloadError, match="invalid format"):
        parse_payment({**body, "invoice_id": "INV_1"}, "USD")
    assert parse_payment({**body, "invoice_id": None}, "USD").invoice_id is None


# --- the scanner's deposits carry their block's time ---------------------------------------

def test_a_scanned_deposit_occurred_at_its_block_time_and_stays_the_webhooks_transfer(
        ) -> None:
    tx = {"hash": "0x" + "11" * 32, "from": "0x" + "22" * 20, "to": ADDRESS,
          "value": hex(10**18), "blockNumber": hex(100)}
    block = {"number": hex(100), "hash": "0x" + "33" * 32, "timestamp": hex(1_780_000_000),
             "transactions": [tx]}
    _, [found] = native_transfers(NET, block)
    event = found.event("u1", 18)
    assert event is not None
    assert event.occurred_at == "2026-05-28T20:26:40Z"
    assert datetime.fromisoformat(event.occurred_at) == datetime.fromtimestamp(
        1_780_000_000, UTC)
    # The webhook's report of the same transfer has no time: still the same transfer.
    webhook = {**event.to_wire(), "provider": "alchemy"}
    del webhook["occurred_at"]
    assert scanned_same_transfer(event.to_wire(), webhook)
    assert block_time({"timestamp": "0x0"}) is None and block_time({}) is None
    _, [untimed] = native_transfers(NET, {**block, "timestamp": None})
    assert (untimed.event("u1", 18) or event).occurred_at is None


# --- what the ledger's batch pays in round trips -------------------------------------------

class RecordingCursor:
    """Records each statement; answers the invoices lookup with `rows`, the rest empty."""

    def __init__(self, rows: list[tuple] | None = None) -> None:
        self.statements: list[str] = []
        self.rows = rows or []
        self._last: list[tuple] = []

    def execute(self, sql: str, params: object = None) -> None:
        self.statements.append(sql)
        self._last = self.rows if sql.startswith("SELECT invoice_id, user_id") else []

    def executemany(self, sql: str, params: object) -> None:
        self.statements.append(sql)

    def fetchall(self) -> list[tuple]:
        return self._last


def test_match_costs_no_query_without_deposits_and_one_when_no_invoice_is_paid() -> None:
    withdrawal = PaymentEvent("w1", EventType.WITHDRAWAL, "u1", "USD", D(1), "payments")
    cur = RecordingCursor()
    assert match(cur, [(0, withdrawal, Outcome.APPLIED),  # type: ignore[arg-type]
                       (1, gateway_deposit("d1", "5", None), Outcome.APPLIED)], "t") == []
    assert cur.statements == []
    deposit = chain_deposit("c1", "1")
    assert match(cur, [(0, deposit, Outcome.PENDING_FINALITY),  # type: ignore[arg-type]
                       (1, settlement(SettlementType.DEPOSIT_FINALIZED, deposit),
                        Outcome.APPLIED)], "t") == []
    assert len(cur.statements) == 1 and "FOR UPDATE" in cur.statements[0]


def test_match_writes_the_payment_the_invoice_and_its_history_and_tags_its_intents() -> None:
    i = invoice()
    row = (i.invoice_id, i.user_id, i.asset, i.amount, i.tolerance_pct, i.order_id,
           i.metadata, i.network, i.address, i.expires_at, i.state.value, None, D(0), D(0),
           i.created_at, i.updated_at, NOW)
    cur = RecordingCursor([row])
    made = match(cur, [("the-record", chain_deposit("c1", "100"),  # type: ignore[arg-type]
                        Outcome.PENDING_FINALITY)], "2026-06-01T12:00:00Z")
    assert [(tag, intent.type.value, intent.data["invoice_id"]) for tag, intent in made] == [
        ("the-record", "invoice.processing", INV)]
    assert [s.split()[0:3] for s in cur.statements] == [
        ["SELECT", "invoice_id,", "user_id,"], ["SELECT", "event_id,", "invoice_id,"],
        ["INSERT", "INTO", "invoice_payments"], ["UPDATE", "invoices", "SET"],
        ["INSERT", "INTO", "invoice_history"]]
