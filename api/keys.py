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

from paystream.schema.db import Cursor

KEY_PREFIX = "psk_"
KEY_PATTERN = re.compile(r"psk_[A-Za-z0-9_-]{43}")
NAME_PATTERN = re.compile(r"[\x20-\x7e]{1,100}")


class Scope(StrEnum):
    READ = "read"    # the GET routes
    WRITE = "write"  # users, deposit addresses, withdrawals


class ApiKeyError(ValueError):
    """A key request the command refuses; the message says why."""


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    name: str
    scopes: frozenset[Scope]
    created_at: datetime
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
            raise ApiKeyError(f"unknown scope {name!r} (scopes: read, write)") from None
    if not scopes:
        raise ApiKeyError("a key needs at least one scope (read, write)")
    return frozenset(scopes)


def create(cur: Cursor, name: str, scopes: frozenset[Scope]) -> tuple[ApiKey, str]:
    """A new key, in the caller's transaction: its record and the key itself, which is
    never stored and cannot be shown again."""
    if NAME_PATTERN.fullmatch(name) is None:
        raise ApiKeyError("a key's name is 1 to 100 printable ASCII characters")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    key_id = "ak_" + secrets.token_hex(8)
    cur.execute("INSERT INTO api_keys (key_id, name, key_hash, scopes)"
                " VALUES (%s, %s, %s, %s) RETURNING created_at",
                (key_id, name, key_hash(key), sorted(s.value for s in scopes)))
    (created_at,) = cur.fetchone() or (None,)
    return ApiKey(key_id, name, scopes, created_at, None), key


def listed(cur: Cursor) -> list[ApiKey]:
    """Every key, revoked ones too, oldest first (never a hash)."""
    cur.execute("SELECT key_id, name, scopes, created_at, revoked_at FROM api_keys"
                " ORDER BY created_at, key_id")
    return [ApiKey(k, n, frozenset(Scope(s) for s in sc), c, r)
            for k, n, sc, c, r in cur.fetchall()]


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


Caller = tuple[str, frozenset[Scope]]  # a live key: (key id, scopes)
# (key id, scopes) of the live key with the hash %(key_hash)s, no row if there is none:
# what "live" means is migration 0012's api_live_key, the one place of that rule.
LIVE_KEY_SQL = "SELECT key_id, scopes FROM api_live_key(%(key_hash)s)"


def caller(key_id: str | None, scopes: Iterable[str] | None) -> Caller | None:
    """The LIVE_KEY_SQL row as a Caller; None when it found no key."""
    return None if key_id is None or scopes is None else (
        key_id, frozenset(Scope(s) for s in scopes))


def live_key(cur: Cursor, key: str) -> Caller | None:
    """(key id, scopes) of the live (not revoked) key `key`, else None. A malformed
    token is not looked up."""
    if KEY_PATTERN.fullmatch(key) is None:
        return None
    cur.execute(LIVE_KEY_SQL, {"key_hash": key_hash(key)})
    row = cur.fetchone()
    return None if row is None else caller(row[0], row[1])
