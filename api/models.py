"""The API's request and answer bodies, path parameters and refusals, for validation and
the OpenAPI document. Amounts are strings (canonical decimal text), never JSON numbers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from paystream.edge import params
from paystream.invoices.create import (
    MAX_EXPIRES_IN_S,
    METADATA_MAX_BYTES,
    MIN_EXPIRES_IN_S,
    ORDER_ID_MAX,
    TOLERANCE_PATTERN,
)
from paystream.schema.events import USER_ID_PATTERN

USER_ID = USER_ID_PATTERN.pattern
AMOUNT = r"^-?[0-9]+(\.[0-9]+)?$"  # what schema.transfers.signed writes
TOLERANCE = f"^{TOLERANCE_PATTERN.pattern}$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Balance(Strict):
    asset: str
    available: str = Field(pattern=AMOUNT)
    pending: str = Field(pattern=AMOUNT)
    held: str = Field(pattern=AMOUNT)


class Balances(Strict):
    user_id: str
    at: datetime | None = Field(None, description="the moment asked for (?at=), if any")
    balances: list[Balance]


class Entry(Strict):
    """One posting to a user account (book: available, pending or held)."""

    transfer_id: int
    user_id: str
    asset: str
    book: str
    delta: str = Field(pattern=AMOUNT)
    event_type: str
    created_at: datetime


class EventStatus(Strict):
    event_id: str
    event_type: str
    user_id: str
    asset: str
    amount: str = Field(pattern=AMOUNT)
    provider: str
    status: str = Field(description="received, pending_finality, applied, rejected, ...")
    outcome: str | None = Field(description="the ledger's outcome, once it judged it")
    trace_id: str
    received_at: datetime
    status_changed_at: datetime
    entries: list[Entry]


class TransactionEntry(Strict):
    asset: str
    book: str
    delta: str = Field(pattern=AMOUNT)


class Transaction(Strict):
    """One transfer as it touched the user's accounts."""

    transfer_id: int
    event_id: str = Field(description="the event that caused it")
    event_type: str
    created_at: datetime
    entries: list[TransactionEntry]


class Transactions(Strict):
    items: list[Transaction]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page;"
                                    " null on the last")


class NewUser(Strict):
    user_id: str = Field(pattern=f"^{USER_ID}$", description=(
        "unique across merchants: another merchant's id answers 409 user_id_taken"))
    merchant_id: str | None = Field(None, pattern="^m_[0-9a-z_]{1,40}$", description=(
        "an operator's key: the merchant the user belongs to (default m_default); a "
        "merchant's key: its own merchant, or absent"))


class User(Strict):
    user_id: str
    merchant_id: str
    created: bool = Field(description="false if it existed already")


class NewAddress(Strict):
    network: str = Field(min_length=1, max_length=64, examples=["ETH_MAINNET"])
    address: str = Field(min_length=1, max_length=130)
    scan_from_block: int | None = Field(
        None, ge=0, le=2**63 - 1, strict=True,
        description="have the chain scanner read this address's deposits from this block"
                    " (an address paid before it was registered); idempotent")


class Address(Strict):
    network: str
    address: str
    user_id: str
    created_at: datetime | None = None


class AddressAdded(Address):
    created: bool = Field(description="false if it was this user's already")


class Addresses(Strict):
    user_id: str
    items: list[Address]


class NewWithdrawal(Strict):
    user_id: str = Field(max_length=64)
    asset: str = Field(max_length=200)
    amount: str = Field(max_length=100, examples=["25.50"])
    destination: str = Field(max_length=200, description="where the gateway pays out")


class WithdrawalRequested(Strict):
    withdrawal_id: str
    status: str
    user_id: str
    asset: str
    amount: str
    destination: str
    trace_id: str


class Withdrawal(Strict):
    withdrawal_id: str
    user_id: str
    asset: str
    amount: str
    destination: str
    created_at: datetime
    status: str = Field(description="requested, held, expiring, settled, failed, expired,"
                        " rejected, dead_lettered")
    event_status: str
    outcome: str | None
    hold_state: str | None
    settled_amount: str | None
    closed_by: str | None
    closed_at: datetime | None
    trace_id: str


class NewInvoice(Strict):
    user_id: str = Field(max_length=64)
    asset: str = Field(max_length=200, examples=["ETH_MAINNET:native", "USD"],
                       description="a chain asset (<NETWORK>:native or <NETWORK>:<token"
                                   " contract>: a dedicated deposit address is assigned)"
                                   " or a gateway asset (the gateway's deposits name the"
                                   " invoice_id)")
    amount: str = Field(max_length=100, examples=["25.50"])
    expires_in_s: int = Field(ge=MIN_EXPIRES_IN_S, le=MAX_EXPIRES_IN_S, strict=True,
                              description="seconds from now to the deadline")
    order_id: str | None = Field(None, min_length=1, max_length=ORDER_ID_MAX,
                                 description="the merchant's reference, printable")
    metadata: dict[str, Any] | None = Field(
        None, description=f"a JSON object of at most {METADATA_MAX_BYTES} bytes (compact"
                          " UTF-8), returned as given")
    payment_tolerance_pct: str | None = Field(
        None, pattern=TOLERANCE, examples=["2.5"],
        description="under- or overpayment within this percentage of the amount still"
                    " settles: a string, 0 to 99.99, at most 2 decimals; default 0")


class Invoice(Strict):
    invoice_id: str
    user_id: str
    asset: str
    amount: str = Field(pattern=AMOUNT)
    amount_paid: str = Field(pattern=AMOUNT, description="credited (final) payments")
    amount_pending: str = Field(pattern=AMOUNT, description="seen, not final yet")
    amount_due: str = Field(pattern=AMOUNT, description="amount - amount_paid, never below 0")
    state: str = Field(description="new, processing, settled, expired, invalid")
    additional_status: str | None = Field(description="paid_partial, paid_over, paid_late")
    expires_at: datetime
    created_at: datetime
    updated_at: datetime
    order_id: str | None
    metadata: dict[str, Any]
    network: str | None = Field(description="a chain invoice's deposit address's network")
    address: str | None = Field(description="a chain invoice's dedicated deposit address")
    payment_tolerance_pct: str = Field(pattern=AMOUNT)


class InvoicePayment(Strict):
    event_id: str = Field(description="the deposit's event id")
    amount: str = Field(pattern=AMOUNT)
    refunded: str = Field(pattern=AMOUNT, description="what refunds, chargebacks or reverts"
                                                      " of the deposit took back of it")
    state: str = Field(description="pending, credited, reorged, reversed (taken back"
                                   " whole)")
    seen_at: datetime = Field(description="when it was paid (the provider's or the"
                                          " block's time)")
    late: bool = Field(description="paid after the deadline (or the cancel)")
    recorded_at: datetime
    credited_at: datetime | None


class InvoiceHistoryLine(Strict):
    state: str
    additional_status: str | None
    expires_at: datetime
    cause: str = Field(description="created, payment:<event id>, expired, extended,"
                                   " cancelled, ...")
    at: datetime


class InvoiceDetail(Invoice):
    payments: list[InvoicePayment]
    history: list[InvoiceHistoryLine]


class Invoices(Strict):
    items: list[Invoice]
    next_cursor: str | None = Field(description="pass as ?cursor= (with the same filters)"
                                    " for the next page; null on the last")


class Error(Strict):
    status: str = Field(examples=["error"])
    code: str
    reason: str
    trace_id: str


class Health(Strict):
    status: str


# The refusals a /v1 route may answer (and /readyz its 503).
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": Error, "description": what} for code, what in (
        (400, "invalid parameter or body"), (401, "no valid API key"),
        (403, "the key lacks the scope"), (404, "no such resource"),
        (409, "conflict"), (429, "rate limited (Retry-After)"),
        (503, "database unavailable (Retry-After)"))}
# Ids in a path: the edges' shared rules (paystream/edge/params.py).
UserId = params.UserIdPath
PrintableId = params.PrintableIdPath
