"""finality/store.py: a chain_deposits row whose chain identity cannot be read (planted,
or left by a bug) is skipped, not raised: one such row used to fail every tick of its
network, so no deposit of that network was decided again."""

from __future__ import annotations

from paystream.finality.store import _usable

CHAIN = {"network": "ETH_MAINNET", "category": "external", "tx_hash": "0x" + "ab" * 32,
         "block_number": 100, "raw_value": hex(15 * 10**17), "decimals": 18,
         "recipient": "0x" + "11" * 20, "sender": "0x" + "22" * 20, "removed": False}


def test_a_row_without_a_usable_chain_identity_is_skipped_and_the_others_kept() -> None:
    rows = [("bad-1", {}, None), ("good", CHAIN, 7), ("bad-2", {**CHAIN, "raw_value": "x"},
                                                     None)]
    kept = list(_usable(rows))
    assert [(d.event_id, extra) for d, extra in kept] == [("good", 7)]
    assert kept[0][0].block_number == 100
