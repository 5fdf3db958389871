"""Money in from a gateway or a chain provider: deposits and airdrops.

A deposit with on-chain facts (`chain`) is a chain deposit: the ledger holds it in
`pending` until its block is final (outcome pending_finality; the finality watcher's
settlement events move it on, schema/events.py's SettlementType). Only a deposit may name
an invoice it pays.
"""

from __future__ import annotations

from paystream.schema.event_types.declaration import SETTLEMENT, Shape, declare
from paystream.schema.processed_events import Outcome

DEPOSIT = declare(
    "deposit", Shape.CREDIT, counter=SETTLEMENT, gateway=True,
    intents={Outcome.APPLIED: "deposit.credited",
             Outcome.PENDING_FINALITY: "deposit.pending"})
AIRDROP = declare(
    "airdrop", Shape.CREDIT, counter=SETTLEMENT, gateway=True,
    intents={Outcome.APPLIED: "deposit.credited"})
