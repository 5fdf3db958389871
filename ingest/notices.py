"""Notices: deliveries acknowledged and recorded, but never credited.

NFT transfers, capacity errors, transfers that touch no known deposit address, removed
logs and re-mined blocks are answered 200 (the provider must not retry them) and kept in
`ingest_notices`, so nothing the provider told us is lost: a reconciliation or the
finality work can read them later.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class NoticeKind(StrEnum):
    NFT = "nft"                        # a transfer with no fungible amount
    CAPACITY_ERROR = "capacity_error"  # the provider could not deliver activity
    IGNORED = "ignored"                # no known deposit address, zero value, ...
    UNSUPPORTED = "unsupported"        # a webhook type or category we do not credit
    REORG = "reorg"                    # a removed log, or a transfer seen in a new block


@dataclass(frozen=True)
class Notice:
    notice_id: str  # stable across redeliveries, so recording is idempotent
    provider: str
    kind: NoticeKind
    reason: str     # short machine label, e.g. unknown_address
    detail: dict[str, Any]
    event_id: str | None = None
    delivery_id: str | None = None


def notice_id(provider: str, kind: NoticeKind, material: object) -> str:
    """A stable id: the same facts give the same id in any payload that carries them."""
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:40]
    return f"{provider}:{kind.value}:{digest}"
