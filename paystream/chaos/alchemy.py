"""Alchemy Address Activity payloads built from REAL receipts, signed as Alchemy signs.

For one mined transaction, the activities Alchemy would send for the watched addresses:
  - `external`: the transaction's own native-coin value (no `log`, no typeTraceAddress,
    rawContract without an address, decimals 18);
  - `token`: one per ERC-20 Transfer log to/from a watched address, with the log as
    the node returned it (rawContract.rawValue is the log's 32-byte data word).
`value` is the float Alchemy shows (never used for money). One payload per block and
transfer type, as the provider batches them (docs/ingest.md#alchemy).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from paystream.finality.evidence import TRANSFER_TOPIC

SIGNATURE_HEADER = "X-Alchemy-Signature"


def sign(body: bytes, key: bytes | str) -> str:
    """Lowercase hex HMAC-SHA256 of the raw body."""
    secret = key.encode() if isinstance(key, str) else key
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


def external_activity(tx: Mapping[str, Any], receipt: Mapping[str, Any]) -> dict[str, Any]:
    """The `external` activity of a native-coin transaction (needs the tx: receipts
    carry no value)."""
    if receipt["transactionHash"] != tx["hash"]:
        raise ValueError("receipt and transaction differ")
    wei = int(tx["value"], 16)
    return {
        "fromAddress": tx["from"].lower(),
        "toAddress": tx["to"].lower(),
        "blockNum": receipt["blockNumber"],
        "hash": tx["hash"].lower(),
        "value": wei / 10**18,
        "erc721TokenId": None,
        "erc1155Metadata": None,
        "asset": "ETH",
        "category": "external",
        "rawContract": {"rawValue": hex(wei), "decimals": 18},
    }


def token_activities(receipt: Mapping[str, Any], *, watched: set[str],
                     tokens: Mapping[str, tuple[str, int]]) -> list[dict[str, Any]]:
    """`token` activities for the receipt's Transfer logs touching a watched address.
    `tokens` maps a lowercase contract address to (symbol, decimals)."""
    out = []
    for log in receipt["logs"]:
        topics = [t.lower() for t in log["topics"]]
        contract = log["address"].lower()
        if len(topics) != 3 or topics[0] != TRANSFER_TOPIC or contract not in tokens:
            continue
        sender, recipient = "0x" + topics[1][-40:], "0x" + topics[2][-40:]
        if sender not in watched and recipient not in watched:
            continue
        symbol, decimals = tokens[contract]
        raw = int(log["data"], 16)
        out.append({
            "fromAddress": sender,
            "toAddress": recipient,
            "blockNum": log["blockNumber"],
            "hash": log["transactionHash"].lower(),
            "value": raw / 10**decimals,
            "erc721TokenId": None,
            "erc1155Metadata": None,
            "asset": symbol,
            "category": "token",
            "rawContract": {"rawValue": log["data"].lower(), "address": contract,
                            "decimals": decimals},
            "log": {
                "address": contract,
                "topics": topics,
                "data": log["data"].lower(),
                "blockNumber": log["blockNumber"],
                "transactionHash": log["transactionHash"].lower(),
                "transactionIndex": log["transactionIndex"],
                "blockHash": log["blockHash"].lower(),
                "logIndex": log["logIndex"],
                "removed": bool(log.get("removed", False)),
            },
        })
    return out


def payload(activities: Sequence[Mapping[str, Any]], *, network: str = "ETH_MAINNET",
            webhook_id: str = "wh_paystreamanvil", delivery_id: str | None = None
            ) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "webhookId": webhook_id,
        "id": delivery_id or "whevt_" + uuid.uuid4().hex[:16],
        "createdAt": now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond:06d}000Z",
        "type": "ADDRESS_ACTIVITY",
        "event": {"network": network, "activity": list(activities)},
    }


def signed(body_obj: Mapping[str, Any], key: bytes | str) -> tuple[bytes, dict[str, str]]:
    """The exact bytes to POST and the headers Alchemy sends with them."""
    body = json.dumps(body_obj, separators=(",", ":")).encode()
    return body, {"Content-Type": "application/json", SIGNATURE_HEADER: sign(body, key)}
