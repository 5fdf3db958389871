"""Who may use the console: its keys (made by `paystream console keys create`, shown once,
stored only as SHA-256) and the sessions a login opens.

A key reads `pck_<43 characters of URL-safe base64>` (32 bytes of the OS's CSPRNG). A
login with a valid, unrevoked key opens a session: its token (32 random bytes) goes to
the browser in an HttpOnly, SameSite=Strict cookie and only its hash is stored. Every
form carries a CSRF token derived from the session's token (HMAC-SHA256), so it needs
no storage and dies with the session. A session ends at its expiry, at logout, or when
its key is revoked.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

from paystream.schema.db import Cursor

KEY_PREFIX = "pck_"
KEY_PATTERN = re.compile(r"pck_[A-Za-z0-9_-]{43}")
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9_-]{43}")
NAME_PATTERN = re.compile(r"[\x20-\x7e]{1,100}")


class AccessError(ValueError):
    """A key request the command refuses; the message says why."""


@dataclass(frozen=True)
class ConsoleKey:
    key_id: str
    name: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class Session:
    key_id: str
    name: str
    expires_at: datetime

    @property
    def actor(self) -> str:
        """Who the audit names: the key's id and the name it was made with."""
        return f"{self.key_id} ({self.name})"


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def csrf_token(session_token: str) -> str:
    """The CSRF token of a session: what its forms carry and every POST must send."""
    return hmac.new(session_token.encode("ascii"), b"paystream-console-csrf",
                    hashlib.sha256).hexdigest()


def csrf_matches(session_token: str, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(csrf_token(session_token), sent)


def create_key(cur: Cursor, name: str) -> tuple[ConsoleKey, str]:
    """A new key, in the caller's transaction: its record and the key itself, which is
    never stored and cannot be shown again."""
    if NAME_PATTERN.fullmatch(name) is None:
        raise AccessError("a key's name is 1 to 100 printable ASCII characters")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    key_id = "ck_" + secrets.token_hex(8)
    cur.execute("INSERT INTO console_keys (key_id, name, key_hash) VALUES (%s, %s, %s)"
                " RETURNING created_at", (key_id, name, _hash(key)))
    (created_at,) = cur.fetchone() or (None,)
    return ConsoleKey(key_id, name, created_at, None), key


def list_keys(cur: Cursor) -> list[ConsoleKey]:
    """Every key, revoked ones too, oldest first (never a hash)."""
    cur.execute("SELECT key_id, name, created_at, revoked_at FROM console_keys"
                " ORDER BY created_at, key_id")
    return [ConsoleKey(*row) for row in cur.fetchall()]


def revoke_key(cur: Cursor, key_id: str) -> bool:
    """Revoke a key now (its sessions end with it); False if it was revoked already."""
    cur.execute("UPDATE console_keys SET revoked_at = now() WHERE key_id = %s"
                " AND revoked_at IS NULL RETURNING key_id", (key_id,))
    if cur.fetchone() is not None:
        return True
    cur.execute("SELECT 1 FROM console_keys WHERE key_id = %s", (key_id,))
    if cur.fetchone() is None:
        raise AccessError(f"no console key {key_id}")
    return False


def login(cur: Cursor, key: str, ttl_s: float) -> tuple[Session, str] | None:
    """A session for a valid, unrevoked key, and its token (for the cookie); None for
    anything else (a wrong, malformed or revoked key: the caller says no more than that)."""
    if KEY_PATTERN.fullmatch(key) is None:
        return None
    cur.execute("SELECT key_id, name FROM console_keys WHERE key_hash = %s"
                " AND revoked_at IS NULL", (_hash(key),))
    row = cur.fetchone()
    if row is None:
        return None
    token = secrets.token_urlsafe(32)
    cur.execute("INSERT INTO console_sessions (session_hash, key_id, expires_at)"
                " VALUES (%s, %s, now() + make_interval(secs => %s)) RETURNING expires_at",
                (_hash(token), row[0], ttl_s))
    (expires_at,) = cur.fetchone() or (None,)
    return Session(row[0], row[1], expires_at), token


def session_of(cur: Cursor, token: str | None) -> Session | None:
    """The live session of a cookie's token, or None (none, ended, expired, its key
    revoked)."""
    if token is None or TOKEN_PATTERN.fullmatch(token) is None:
        return None
    cur.execute("SELECT s.key_id, k.name, s.expires_at FROM console_sessions s"
                " JOIN console_keys k USING (key_id) WHERE s.session_hash = %s"
                " AND s.ended_at IS NULL AND s.expires_at > now() AND k.revoked_at IS NULL",
                (_hash(token),))
    row = cur.fetchone()
    return None if row is None else Session(*row)


def logout(cur: Cursor, token: str) -> None:
    cur.execute("UPDATE console_sessions SET ended_at = now() WHERE session_hash = %s"
                " AND ended_at IS NULL", (_hash(token),))
