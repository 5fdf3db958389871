"""A deposit address's past, scanned on request: the chain_scan_backfills rows
(migrations/0024_chain_scan_backfills.sql). The operator (`addresses add --scan-from`)
and the merchant API request one here; the chain scanner
(paystream.finality.scanner.service) works it."""

from __future__ import annotations

from paystream.schema.db import Cursor, one_row
from paystream.schema.users import UserError, normal_address


def request(cur: Cursor, network: str, address: str, from_block: int) -> int:
    """Ask the scanner to read `address`'s deposits from `from_block` up to its cursor;
    the request's id. The address must be registered (in the same transaction, or
    before). Requesting twice is harmless: a transfer recorded once is a duplicate."""
    if from_block < 0:
        raise UserError(f"a scan starts at block 0 or later, not {from_block}",
                        "invalid_block")
    network, address = normal_address(network, address)
    cur.execute("INSERT INTO chain_scan_backfills (network, address, from_block, next_block)"
                " VALUES (%s, %s, %s, %s) RETURNING backfill_id",
                (network, address, from_block, from_block))
    return int(one_row(cur)[0])
