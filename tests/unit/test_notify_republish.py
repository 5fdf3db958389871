"""notify/republish.py rebuilds, after a failover, the intents the ledger's batches made
in its window: from each event's stored payload and the outcome recorded now. A chain
deposit's recorded outcome has moved on once its settlement applied, but its batch told
`deposit.pending`, so that is the intent rebuilt (a failover once made 153
`deposit.credited` notifications nobody had been owed)."""

from __future__ import annotations

from datetime import UTC, datetime

from paystream.notify.intents import IntentType, intent_id
from paystream.notify.republish import remade

AT = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
CHAIN = {"network": "ETH_MAINNET", "category": "external", "tx_hash": "0x" + "ab" * 32,
         "block_number": 100, "raw_value": hex(15 * 10**17), "decimals": 18,
         "recipient": "0x" + "11" * 20, "sender": "0x" + "22" * 20, "removed": False}


def _wire(event_id: str, chain: dict | None = None, event_type: str = "deposit") -> dict:
    wire = {"event_id": event_id, "event_type": event_type, "user_id": "u-1",
            "asset": "ETH_MAINNET:native" if chain else "USD", "amount": "1.5",
            "provider": "alchemy" if chain else "payments"}
    return {**wire, "chain": chain} if chain else wire


def _types(rows: list[tuple[str, datetime, dict, str]]) -> dict[str, IntentType]:
    return {intent.data["event_id"]: intent.type for intent, _ in remade(rows).values()}


def test_a_settled_chain_deposit_is_told_pending_as_its_batch_told_it() -> None:
    rows = [(outcome, AT, _wire(f"d-{outcome}", CHAIN), "t")
            for outcome in ("pending_finality", "applied", "reorged")]
    made = remade(rows)
    assert {i.type for i, _ in made.values()} == {IntentType.DEPOSIT_PENDING}
    assert set(made) == {intent_id(f"d-{o}", IntentType.DEPOSIT_PENDING)
                         for o in ("pending_finality", "applied", "reorged")}


def test_a_plain_deposit_and_a_rejected_chain_deposit_keep_their_own_intents() -> None:
    assert _types([("applied", AT, _wire("plain"), "t"),
                   ("account_flagged", AT, _wire("flagged", CHAIN), "t"),
                   ("insufficient_funds", AT, _wire("w", None, "withdrawal"), "t")]) == {
        "plain": IntentType.DEPOSIT_CREDITED, "flagged": IntentType.BALANCE_REJECTED,
        "w": IntentType.WITHDRAWAL_REJECTED}
