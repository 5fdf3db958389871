"""The operator's endpoints: add, list, disable, enable, rotate a secret (as the ops role,
which writes a signing key and never reads one back: migration 0011)."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from paystream.notify.address_guard import AddressGuard, AddressRefused
from paystream.notify.intents import check_pattern
from paystream.schema import merchants, users
from paystream.schema.db import Cursor
from paystream.schema.events import USER_ID_PATTERN
from paystream.schema.merchants import DEFAULT_MERCHANT
from paystream.standard_webhooks import encode_secret

KEY_BYTES = 32  # a fresh HMAC-SHA256 key: 256 bits, as the hash
MAX_URL_LENGTH = 2000


class EndpointRefused(ValueError):  # noqa: N818 - a refusal, the message says why
    """The request cannot be done as asked."""


@dataclass(frozen=True)
class Endpoint:
    endpoint_id: str
    url: str
    user_id: str | None
    event_types: list[str]
    created_at: datetime
    failing_since: datetime | None
    disabled_at: datetime | None
    disabled_reason: str | None
    merchant_id: str | None  # None: every merchant's notifications
    deleted_at: datetime | None  # deleted by its merchant (the API)


COLUMNS = ("endpoint_id", "url", "user_id", "event_types", "created_at", "failing_since",
           "disabled_at", "disabled_reason", "merchant_id", "deleted_at")


def check_url(url: str) -> str:
    """An http(s) URL with a host, as typed; EndpointRefused says what is wrong. No
    credentials in it: `endpoints list` shows URLs, and the signature is what tells a
    receiver the POST is ours."""
    if len(url) > MAX_URL_LENGTH or any(c.isspace() or not c.isprintable() for c in url):
        raise EndpointRefused(f"--url must be at most {MAX_URL_LENGTH} printable characters,"
                              " no spaces")
    try:
        parts = urlsplit(url)
        host, _port = parts.hostname, parts.port  # .port raises on a bad one
    except ValueError as exc:  # an unclosed [IPv6], a port out of range
        raise EndpointRefused(f"--url is not a URL ({exc}): {url[:200]!r}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise EndpointRefused(f"--url must be an http:// or https:// URL with a host,"
                              f" got {url[:200]!r}")
    if parts.username is not None or parts.password is not None:
        raise EndpointRefused("--url must not carry credentials (user:password@): receivers"
                              " authenticate paystream by the webhook signature")
    return url


def guard_at_creation(url: str, guard: AddressGuard) -> None:
    """The SSRF guard's refusal of `url` as an EndpointRefused."""
    try:
        guard.check_at_creation(url)
    except AddressRefused as exc:
        raise EndpointRefused(f"--url {exc}") from None


def parse_events(text: str | None) -> list[str]:
    """`deposit.*,withdrawal.rejected` as a list of checked filters (none: every type)."""
    if not text:
        return []
    try:
        return sorted({check_pattern(p.strip()) for p in text.split(",") if p.strip()})
    except ValueError as exc:
        raise EndpointRefused(str(exc)) from None


def add(cur: Cursor, url: str, user_id: str | None, events: list[str], *,
        guard: AddressGuard, merchant_id: str | None = DEFAULT_MERCHANT) -> tuple[str, str]:
    """A new enabled endpoint of `merchant_id` (None: every merchant's notifications);
    returns (its id, its `whsec_` secret: shown only now). `guard` (the SSRF guard's
    settings) refuses a URL leading inside our network."""
    check_url(url)
    guard_at_creation(url, guard)
    if user_id is not None and USER_ID_PATTERN.fullmatch(user_id) is None:
        raise EndpointRefused(f"--user must match {USER_ID_PATTERN.pattern}, got {user_id!r}")
    if user_id is not None and not users.exists(cur, user_id):
        raise EndpointRefused(f"no user {user_id!r}: add it first (paystream users add)")
    if merchant_id is not None and not merchants.exists(cur, merchant_id):
        raise EndpointRefused(f"no merchant {merchant_id!r} (paystream merchants list)")
    if user_id is not None and merchant_id is not None:
        cur.execute("SELECT merchant_id FROM users WHERE user_id = %s", (user_id,))
        (owner,) = cur.fetchone() or (None,)
        if owner != merchant_id:  # it would never hear of its user (notify/slots.py)
            raise EndpointRefused(f"user {user_id!r} belongs to merchant {owner!r}: pass"
                                  f" --merchant {owner}")
    endpoint_id = "ep_" + secrets.token_hex(12)
    key = secrets.token_bytes(KEY_BYTES)
    cur.execute("INSERT INTO notification_endpoints (endpoint_id, url, user_id, event_types,"
                " secret, merchant_id) VALUES (%s, %s, %s, %s, %s, %s)",
                (endpoint_id, url, user_id, events, key, merchant_id))
    cur.execute("INSERT INTO endpoint_actions (endpoint_id, merchant_id, actor, action,"
                " detail) VALUES (%s, %s, 'operator', 'create', %s)",
                (endpoint_id, merchant_id, json.dumps({"url": url, "event_types": events,
                                                       "user_id": user_id})))
    return endpoint_id, encode_secret(key)


def list_endpoints(cur: Cursor) -> list[Endpoint]:
    cur.execute(f"SELECT {', '.join(COLUMNS)} FROM notification_endpoints ORDER BY created_at")
    return [Endpoint(*row) for row in cur.fetchall()]


def disable(cur: Cursor, endpoint_id: str, reason: str) -> None:
    cur.execute("UPDATE notification_endpoints SET disabled_at = now(), disabled_reason = %s"
                " WHERE endpoint_id = %s AND disabled_at IS NULL RETURNING endpoint_id",
                (reason, endpoint_id))
    if cur.fetchone() is None:
        _refuse_missing(cur, endpoint_id, "already disabled")


def enable(cur: Cursor, endpoint_id: str) -> None:
    """Enabled again, its failing run forgotten; its pending slots are sent again."""
    cur.execute("UPDATE notification_endpoints SET disabled_at = NULL, disabled_reason = NULL,"
                " failing_since = NULL WHERE endpoint_id = %s AND disabled_at IS NOT NULL"
                " RETURNING endpoint_id", (endpoint_id,))
    if cur.fetchone() is None:
        _refuse_missing(cur, endpoint_id, "not disabled")


def rotate_secret(cur: Cursor, endpoint_id: str, overlap_s: float) -> str:
    """A new key; the old one still signs for `overlap_s`. Returns the new secret."""
    key = secrets.token_bytes(KEY_BYTES)
    cur.execute("SELECT rotate_notification_secret(%s, %s, make_interval(secs => %s))",
                (endpoint_id, key, overlap_s))
    row = cur.fetchone()
    if row is None or row[0] is None:
        raise EndpointRefused(f"no endpoint {endpoint_id}")
    return encode_secret(key)


def _refuse_missing(cur: Cursor, endpoint_id: str, otherwise: str) -> None:
    cur.execute("SELECT 1 FROM notification_endpoints WHERE endpoint_id = %s", (endpoint_id,))
    if cur.fetchone() is None:
        raise EndpointRefused(f"no endpoint {endpoint_id}")
    raise EndpointRefused(f"endpoint {endpoint_id} is {otherwise}")
