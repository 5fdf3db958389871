"""The ledger group's own variables (its consumer settings are `paystream consume` flags)."""

from __future__ import annotations

from pydantic import Field

from paystream.env import EnvSettings


class LedgerSettings(EnvSettings):
    """Read by `paystream consume ledger`; the consumer's own settings are flags
    (`paystream consume --help`, [guarantees](guarantees.md#time-budgets))."""

    doc_section = "Ledger"

    reconcile_interval_s: float = Field(
        30.0, alias="PAYSTREAM_RECONCILE_INTERVAL_S", gt=0,
        description="how often the hot-path check re-reconciles the balances the ledger "
                    "touched")
    reconcile_max_pairs: int = Field(
        5000, alias="PAYSTREAM_RECONCILE_MAX_PAIRS", ge=1,
        description="(user, asset) pairs per hot-path check at most; the rest wait for the "
                    "next one")
    # How long a withdrawal_requested holds its money before the expiry scheduler voids
    # it (operator_events.py), unless the gateway settles or fails it first.
    hold_ttl_s: float = Field(
        86_400.0, alias="PAYSTREAM_HOLD_TTL_S", gt=0,
        description="how long a `withdrawal_requested` holds its amount and fee before "
                    "`paystream holds expire` voids it (unless the gateway settles or fails "
                    "it first); fixed when the hold is placed")
