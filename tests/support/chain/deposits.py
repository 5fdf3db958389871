"""From real transactions to the deposits the ledger would hold as pending.

The path is the production one: receipts → Alchemy payload (signed) → ingest's own
parser and classifier → PaymentEvent.chain → ExpectedDeposit. So the finality code is
tested on exactly the `chain` dict ingest writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from paystream.chaos import alchemy
from paystream.ingest import alchemy as ingest_alchemy
from paystream.ingest import alchemy_signature
from paystream.schema.chain import ExpectedDeposit
from tests.support.chain.node import Chain, Token

NETWORK = "ETH_MAINNET"
SIGNING_KEY = b"paystream-anvil-alchemy-signing-key-0001"


def activities(chain: Chain, tx_hashes: Iterable[str], watched: set[str],
               tokens: Iterable[Token] = ()) -> list[dict[str, Any]]:
    token_meta = {t.address: (t.symbol, t.decimals) for t in tokens}
    out: list[dict[str, Any]] = []
    for tx_hash in tx_hashes:
        receipt = chain.receipt(tx_hash)
        assert receipt is not None, f"{tx_hash} is not mined"
        tx = chain.transaction(tx_hash)
        if int(tx["value"], 16) and tx["to"] and tx["to"].lower() in watched:
            out.append(alchemy.external_activity(tx, receipt))
        out.extend(alchemy.token_activities(receipt, watched=watched, tokens=token_meta))
    return out


def deliver(activity: list[dict[str, Any]], owners: Mapping[str, str]
            ) -> list[ExpectedDeposit]:
    """Sign a payload, check the signature as ingest does, parse and classify it as
    ingest does, and turn each deposit event into an ExpectedDeposit."""
    body, headers = alchemy.signed(alchemy.payload(activity, network=NETWORK), SIGNING_KEY)
    alchemy_signature.verify(body, headers[alchemy.SIGNATURE_HEADER], [SIGNING_KEY])
    delivery = ingest_alchemy.parse_delivery(json.loads(body))
    classified = ingest_alchemy.classify(delivery, owners)
    return [ExpectedDeposit.from_chain(e.event_id, e.chain or {}) for e in classified.events]
