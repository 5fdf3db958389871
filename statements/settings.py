"""The matching's tolerances and the contract's fee: one frozen, validated object built
from the environment (`paystream statements ...` exits 2 with the reason on a bad value).
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import Field

from paystream.env import EnvSettings


class StatementSettings(EnvSettings):
    """Read by `paystream statements import` and `match` ([statements](statements.md)):
    what counts as the same amount, the same time and the right fee."""

    doc_section = "Settlement statements"

    amount_tolerance: Decimal = Field(Decimal(0), alias="PAYSTREAM_STATEMENTS_AMOUNT_TOLERANCE",
                                      ge=0, description=(
        "a line's amount may differ from its event's by this much and still match"))
    fee_tolerance: Decimal = Field(Decimal("0.01"), alias="PAYSTREAM_STATEMENTS_FEE_TOLERANCE",
                                   ge=0, description=(
        "a line's fee may differ from the contract's by this much before it is a "
        "fee_mismatch"))
    # The gateway's contract: what a payment's fee should be (Stripe's US card pricing
    # as the example default). Refunds, chargebacks and payouts are expected to carry 0.
    fee_percent: Decimal = Field(Decimal("2.9"), alias="PAYSTREAM_STATEMENTS_FEE_PERCENT",
                                 ge=0, le=100, description=(
        "the contract's fee on a payment: this percent of its amount ..."))
    fee_fixed: Decimal = Field(Decimal("0.30"), alias="PAYSTREAM_STATEMENTS_FEE_FIXED", ge=0,
                               description="... plus this fixed part")
    time_window_s: float = Field(3600.0, alias="PAYSTREAM_STATEMENTS_TIME_WINDOW_S", ge=0,
                                 le=30 * 86400, description=(
        "a line without a known reference matches an event of its type, currency and "
        "amount received within this many seconds of its `created`"))
