"""Merchants (table merchants, migration 0033): the tenants that own users and, through
them, everything the merchant API shows; made by `paystream merchants add`, in the
caller's transaction. What a merchant's key may see is the database's rule (0033's
row-level security), not this module's."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from paystream.schema.db import Cursor, one_row

# Everything that existed before merchants, and what the previous release writes.
DEFAULT_MERCHANT = "m_default"
MERCHANT_ID_PATTERN = re.compile(r"m_[0-9a-z_]{1,40}")
NAME_PATTERN = re.compile(r"[\x20-\x7e]{1,100}")


class MerchantError(ValueError):
    """A merchant that cannot be made or is not there; the message says why."""


@dataclass(frozen=True)
class Merchant:
    merchant_id: str
    name: str
    created_at: datetime
    users: int


def add(cur: Cursor, name: str) -> Merchant:
    """A new merchant with a fresh id (`m_<16 hex>`)."""
    if NAME_PATTERN.fullmatch(name) is None:
        raise MerchantError("a merchant's name is 1 to 100 printable ASCII characters")
    merchant_id = "m_" + secrets.token_hex(8)
    cur.execute("INSERT INTO merchants (merchant_id, name) VALUES (%s, %s)"
                " RETURNING created_at", (merchant_id, name))
    return Merchant(merchant_id, name, one_row(cur)[0], 0)


def exists(cur: Cursor, merchant_id: str) -> bool:
    if MERCHANT_ID_PATTERN.fullmatch(merchant_id) is None:
        return False
    cur.execute("SELECT 1 FROM merchants WHERE merchant_id = %s", (merchant_id,))
    return cur.fetchone() is not None


def listed(cur: Cursor) -> list[Merchant]:
    """Every merchant, oldest first, with its number of users."""
    cur.execute("SELECT m.merchant_id, m.name, m.created_at,"
                " (SELECT count(*) FROM users u WHERE u.merchant_id = m.merchant_id)"
                " FROM merchants m ORDER BY m.created_at, m.merchant_id")
    return [Merchant(*row) for row in cur.fetchall()]
