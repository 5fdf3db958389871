"""API keys: made by `paystream apikeys create`, shown once, stored only as SHA-256
(migration 0010 says why a fast hash suffices for 256 random bits), found by that hash
on every request.

A key reads `psk_<43 characters of URL-safe base64>`: the prefix lets a secret scanner
recognise a leaked one; the rest is 32 bytes from the OS's CSPRNG.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from paystream.schema import merchants
from paystream.schema.db import Cursor, one_row

KEY_PREFIX = "psk_"
KEY_PATTERN = re.compile(r"psk_[A-Za-z0-9_-]{43}")
NAME_PATTERN = re.compile(r"[\x20-\x7e]{1,100}")


class Scope(StrEnum):
    """What a key may do: a resource's read or write. `read` and `write` (every key made
    before per-resource scopes) hold every resource's read or write scope."""

    READ = "read"
    WRITE = "write"
    USERS_READ = "users:read"        # deposit addresses
    USERS_WRITE = "users:write"      # users, deposit addresses
    BALANCES_READ = "balances:read"
    TRANSACTIONS_READ = "transactions:read"
    EVENTS_READ = "events:read"
    WITHDRAWALS_READ = "withdrawals:read"
    WITHDRAWALS_WRITE = "withdrawals:write"
    INVOICES_READ = "invoices:read"
    INVOICES_WRITE = "invoices:write"
    ENDPOINTS_READ = "endpoints:read"
    ENDPOINTS_WRITE = "endpoints:write"

    @property
    def broad(self) -> Scope:
        """The old all-resources scope that holds this one (`read` or `write`)."""
        return Scope.WRITE if self.value.endswith("write") else Scope.READ


def grants(held: frozenset[Scope], needed: Scope) -> bool:
    """Whether a key holding `held` may do what `needed` names."""
    return needed in held or needed.broad in held


class ApiKeyError(ValueError):
    """A key request the command refuses; the message says why."""


SCOPE_NAMES = ", ".join(s.value for s in Scope)


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    name: str
    scopes: frozenset[Scope]
    merchant_id: str | None  # None: an operator's key, every merchant's
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None  # to within a minute (api/key_use.py)
    revoked_at: datetime | None


def key_hash(key: str) -> str:
    """What is stored of a key, and what a request's bearer token is looked up by."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_scopes(text: str | Iterable[str]) -> frozenset[Scope]:
    """`read,write` (or an iterable of names) as scopes; ApiKeyError names a wrong one."""
    names = [s.strip() for s in (text.split(",") if isinstance(text, str) else text)]
    scopes = set()
    for name in names:
        try:
            scopes.add(Scope(name))
        except ValueError:
            raise ApiKeyError(f"unknown scope {name!r} (scopes: {SCOPE_NAMES})") from None
    if not scopes:
        raise ApiKeyError(f"a key needs at least one scope ({SCOPE_NAMES})")
    return frozenset(scopes)


def create(cur: Cursor, name: str, scopes: frozenset[Scope], merchant_id: str | None,
           expires_at: datetime | None = None) -> tuple[ApiKey, str]:
    """A new key of `merchant_id` (None: an operator's key, which sees every merchant),
    in the caller's transaction: its record and the key itself, which is never stored
    and cannot be shown again."""
    if NAME_PATTERN.fullmatch(name) is None:
        raise ApiKeyError("a key's name is 1 to 100 printable ASCII characters")
    if merchant_id is not None and not merchants.exists(cur, merchant_id):
        raise ApiKeyError(f"no merchant {merchant_id!r} (paystream merchants list)")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    key_id = "ak_" + secrets.token_hex(8)
    cur.execute("INSERT INTO api_keys (key_id, name, key_hash, scopes, merchant_id,"
                " expires_at) VALUES (%s, %s, %s, %s, %s, %s)"
                " RETURNING created_at, expires_at <= now()",
                (key_id, name, key_hash(key), sorted(s.value for s in scopes), merchant_id,
                 expires_at))
    created_at, expired = one_row(cur)
    if expired:
        raise ApiKeyError("the expiry is not in the future")
    return ApiKey(key_id, name, scopes, merchant_id, created_at, expires_at, None,
                  None), key


def listed(cur: Cursor, merchant_id: str | None = None) -> list[ApiKey]:
    """Every key (of `merchant_id`, if given), revoked ones too, oldest first (never a
    hash)."""
    cur.execute("SELECT key_id, name, scopes, merchant_id, created_at, expires_at,"
                " last_used_at, revoked_at FROM api_keys"
                " WHERE %(merchant)s::text IS NULL OR merchant_id = %(merchant)s"
                " ORDER BY created_at, key_id", {"merchant": merchant_id})
    return [ApiKey(k, n, frozenset(Scope(s) for s in sc), m, c, e, u, r)
            for k, n, sc, m, c, e, u, r in cur.fetchall()]


def revoke(cur: Cursor, key_id: str) -> bool:
    """Revoke a key now; False if it was revoked already. ApiKeyError if there is none."""
    cur.execute("UPDATE api_keys SET revoked_at = now() WHERE key_id = %s"
                " AND revoked_at IS NULL RETURNING key_id", (key_id,))
    if cur.fetchone() is not None:
        return True
    cur.execute("SELECT 1 FROM api_keys WHERE key_id = %s", (key_id,))
    if cur.fetchone() is None:
        raise ApiKeyError(f"no API key {key_id!r}")
    return False


@dataclass(frozen=True)
class Caller:
    """A live key, as a request's check found it."""

    key_id: str
    scopes: frozenset[Scope]
    merchant_id: str | None  # None: an operator's key


# The live key with the hash %(key_hash)s (no row if there is none), its merchant set for
# the rest of the transaction: migration 0033's api_caller (what "live" means is its
# api_live_key, the one place of that rule; the merchant is what its row-level security
# policies admit).
LIVE_KEY_SQL = "SELECT key_id, scopes, merchant_id FROM api_caller(%(key_hash)s)"


def caller(key_id: str | None, scopes: Iterable[str] | None,
           merchant_id: str | None = None) -> Caller | None:
    """The LIVE_KEY_SQL row as a Caller; None when it found no key."""
    return None if key_id is None or scopes is None else Caller(
        key_id, frozenset(Scope(s) for s in scopes), merchant_id)


def live_key(cur: Cursor, key: str) -> Caller | None:
    """The live (not revoked, not expired) key `key`, else None; its merchant is set for
    the transaction either way. A malformed token is not looked up."""
    if KEY_PATTERN.fullmatch(key) is None:
        return None
    cur.execute(LIVE_KEY_SQL, {"key_hash": key_hash(key)})
    return caller(*one_row(cur))
