"""Users and their deposit addresses (tables users, deposit_addresses): the rules for
creating them, for every door that does (`paystream users add` / `addresses add`,
ops/users.py, and the merchant API, api/app.py), in the caller's transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from paystream.schema import merchants
from paystream.schema.chain import ADDRESS_PATTERN, NETWORK_PATTERN
from paystream.schema.db import Cursor
from paystream.schema.events import USER_ID_PATTERN
from paystream.schema.merchants import DEFAULT_MERCHANT


class UserError(ValueError):
    """A user or address that cannot be created; the message says why. `code` is a short
    machine label (the API's error code)."""

    def __init__(self, detail: str, code: str) -> None:
        super().__init__(detail)
        self.code = code


@dataclass(frozen=True)
class DepositAddress:
    network: str
    address: str
    user_id: str
    created_at: datetime


def check_user_id(user_id: str) -> None:
    if USER_ID_PATTERN.fullmatch(user_id) is None:
        raise UserError(f"user id must match {USER_ID_PATTERN.pattern}: {user_id[:80]!r}",
                        "invalid_user_id")


def add_user(cur: Cursor, user_id: str, merchant_id: str = DEFAULT_MERCHANT) -> bool:
    """Create a user of `merchant_id`; return False if it was that merchant's already.
    User ids are unique across merchants: one another merchant has (or, through the
    merchant API, one its key cannot see) is refused as taken."""
    check_user_id(user_id)
    if not merchants.exists(cur, merchant_id):
        raise UserError(f"no merchant {merchant_id[:80]!r}", "unknown_merchant")
    cur.execute("INSERT INTO users (user_id, merchant_id) VALUES (%s, %s)"
                " ON CONFLICT DO NOTHING RETURNING user_id", (user_id, merchant_id))
    if cur.fetchone() is not None:
        return True
    cur.execute("SELECT merchant_id FROM users WHERE user_id = %s", (user_id,))
    found = cur.fetchone()
    if found is None or found[0] != merchant_id:
        raise UserError(f"user id {user_id!r} is taken (user ids are unique across"
                        " merchants: prefix yours, or use UUIDs)", "user_id_taken")
    return False


def exists(cur: Cursor, user_id: str) -> bool:
    cur.execute("SELECT 1 FROM users WHERE user_id = %s", (user_id,))
    return cur.fetchone() is not None


def normal_address(network: str, address: str) -> tuple[str, str]:
    """(network, address) as stored: the network upper-cased, the address lower-cased
    (lookups compare case-insensitively); UserError if either is not one."""
    network = network.upper()
    if NETWORK_PATTERN.fullmatch(network) is None:
        raise UserError(f"network must match {NETWORK_PATTERN.pattern}: {network[:80]!r}",
                        "invalid_network")
    if ADDRESS_PATTERN.fullmatch(address.removeprefix("0x")) is None:
        raise UserError(f"not an address: {address[:140]!r}", "invalid_address")
    return network, address.lower()


def add_address(cur: Cursor, network: str, address: str, user_id: str) -> bool:
    """Assign a deposit address to a user; return False if it already was theirs.
    UserError if the user does not exist or the address is someone else's."""
    network, address = normal_address(network, address)
    if not exists(cur, user_id):
        raise UserError(f"unknown user {user_id!r}; add it first", "unknown_user")
    cur.execute("INSERT INTO deposit_addresses (network, address, user_id)"
                " VALUES (%s, %s, %s) ON CONFLICT (network, address) DO NOTHING"
                " RETURNING user_id", (network, address, user_id))
    if cur.fetchone() is not None:
        return True
    cur.execute("SELECT user_id FROM deposit_addresses WHERE network = %s"
                " AND address = %s", (network, address))
    found = cur.fetchone()
    # None: the insert conflicted on a row this caller may not see (another merchant's).
    if found is None or found[0] != user_id:
        # An address credits exactly one user: reassigning it would redirect deposits.
        raise UserError(f"{network} {address} already belongs to another user",
                        "address_taken")
    return False


def addresses(cur: Cursor, user_id: str, limit: int = 500) -> list[DepositAddress]:
    """A user's deposit addresses, oldest first, at most `limit`."""
    cur.execute("SELECT network, address, user_id, created_at FROM deposit_addresses"
                " WHERE user_id = %s ORDER BY created_at, network, address LIMIT %s",
                (user_id, limit))
    return [DepositAddress(*row) for row in cur.fetchall()]
