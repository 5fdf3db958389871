"""A merchant's own webhook endpoints (the merchant API's /v1/endpoints, docs/api.md
#endpoints): create, read, change, delete, read and rotate the secret, the delivery
log, redeliver, recover, test. Each function runs in the caller's transaction as the
API's role, so the database's tenancy policies (migrations 0033, 0035) admit only the
caller's merchant's rows: another merchant's endpoint is not found, as one that does
not exist. Every write is recorded in endpoint_actions, once per Idempotency-Key.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from paystream.notify import endpoints
from paystream.notify.address_guard import AddressGuard
from paystream.notify.intents import IntentType, intent_id, now_text
from paystream.refusals import Conflict, Invalid, NotFound
from paystream.schema.db import Cursor
from paystream.standard_webhooks import encode_secret

ENDPOINT_ID_PATTERN = re.compile(r"ep_[0-9a-f]{24}")
# A delivery is one intent to one endpoint: `<intent id>.<endpoint id>`.
DELIVERY_ID_PATTERN = re.compile(r"(ntf_[0-9a-f]{32})\.(ep_[0-9a-f]{24})")
DESCRIPTION_MAX = 500
COLUMNS = ("endpoint_id, url, event_types, description, merchant_id, created_at,"
           " disabled_at, disabled_reason, failing_since")


@dataclass(frozen=True)
class Actor:
    """Who acts: `api:<key id>` for a key, with the key's merchant (None: an operator's
    key, whose endpoints see every merchant)."""

    name: str
    merchant_id: str | None


def _answer(row: tuple[Any, ...]) -> dict[str, Any]:
    (endpoint_id, url, event_types, description, merchant_id, created_at, disabled_at,
     disabled_reason, failing_since) = row
    return {"endpoint_id": endpoint_id, "url": url, "event_types": list(event_types),
            "description": description, "merchant_id": merchant_id,
            "enabled": disabled_at is None, "disabled_at": disabled_at,
            "disabled_reason": disabled_reason, "failing_since": failing_since,
            "created_at": created_at}


def check_endpoint_id(endpoint_id: str) -> str:
    if ENDPOINT_ID_PATTERN.fullmatch(endpoint_id) is None:
        raise NotFound(f"no endpoint {endpoint_id[:80]!r}", code="unknown_endpoint")
    return endpoint_id


def _found(cur: Cursor, endpoint_id: str, *, lock: bool = False) -> dict[str, Any]:
    """The caller's endpoint (not deleted), or NotFound."""
    check_endpoint_id(endpoint_id)
    cur.execute(f"SELECT {COLUMNS} FROM notification_endpoints WHERE endpoint_id = %s"
                f" AND deleted_at IS NULL{' FOR UPDATE' if lock else ''}", (endpoint_id,))
    row = cur.fetchone()
    if row is None:
        raise NotFound(f"no endpoint {endpoint_id!r}", code="unknown_endpoint")
    return _answer(row)


def _description(text: str | None) -> str | None:
    if text is not None and (len(text) > DESCRIPTION_MAX or not text.isprintable()):
        raise Invalid(f"description is at most {DESCRIPTION_MAX} printable characters",
                      code="invalid_description")
    return text


def _checked_url(url: str, guard: AddressGuard) -> str:
    """endpoints.check_url and the SSRF guard, as the API's refusal."""
    try:
        endpoints.check_url(url)
        endpoints.guard_at_creation(url, guard)
    except endpoints.EndpointRefused as exc:
        raise Invalid(str(exc).replace("--url", "url"), code="invalid_url") from None
    return url


def _events(patterns: list[str]) -> list[str]:
    try:
        return endpoints.parse_events(",".join(patterns))
    except endpoints.EndpointRefused as exc:
        raise Invalid(str(exc), code="invalid_event_types") from None


def jsonable(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer as JSON gives it back: moments as ISO 8601 UTC text (so a replayed
    answer, read back from endpoint_actions, is the first one byte for byte)."""
    return {k: (v.isoformat().replace("+00:00", "Z") if isinstance(v, datetime) else v)
            for k, v in answer.items()}


def request_hash(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, default=str).encode()
                          ).hexdigest()


def once(cur: Cursor, actor: Actor, idempotency_key: str | None, request: dict[str, Any],
         work: Callable[[], tuple[str, str, dict[str, Any], dict[str, Any]]]
         ) -> tuple[dict[str, Any], bool]:
    """`work` (returning endpoint id, action, detail, answer) recorded as an action;
    with an Idempotency-Key, done once: the same request again answers the first
    answer (True: a replay), another request with the key is a Conflict."""
    digest = request_hash(request)
    if idempotency_key is not None:
        # Two requests with one key at once: the second waits for the first's commit.
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 49))",
                    (f"{actor.name}\n{idempotency_key}",))
        cur.execute("SELECT request_hash, response FROM endpoint_actions"
                    " WHERE actor = %s AND idempotency_key = %s", (actor.name, idempotency_key))
        row = cur.fetchone()
        if row is not None:
            if row[0] != digest:
                raise Conflict("this Idempotency-Key was used with another request",
                               code="idempotency_key_reused")
            return row[1], True
    endpoint_id, action, detail, answer = work()
    answer = jsonable(answer)
    cur.execute("INSERT INTO endpoint_actions (endpoint_id, merchant_id, actor, action,"
                " detail, idempotency_key, request_hash, response)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (endpoint_id, actor.merchant_id, actor.name, action, json.dumps(detail),
                 idempotency_key, digest if idempotency_key else None,
                 json.dumps(answer) if idempotency_key else None))
    return answer, False


def create(cur: Cursor, actor: Actor, *, url: str, event_types: list[str],
           description: str | None, merchant_id: str | None, guard: AddressGuard,
           idempotency_key: str) -> tuple[dict[str, Any], bool]:
    """A new enabled endpoint of the caller's merchant (an operator's key names one);
    its answer carries the secret. (answer, whether it was a replay)."""
    owner = actor.merchant_id or merchant_id
    if owner is None:
        raise Invalid("an operator's key names the endpoint's merchant_id",
                      code="merchant_required")
    if actor.merchant_id is not None and merchant_id not in (None, owner):
        raise NotFound(f"no merchant {merchant_id!r}", code="unknown_merchant")
    request = {"url": url, "event_types": event_types, "description": description,
               "merchant_id": owner}

    def work() -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        _checked_url(url, guard)
        patterns = _events(event_types)
        endpoint_id = "ep_" + secrets.token_hex(12)
        key = secrets.token_bytes(endpoints.KEY_BYTES)
        cur.execute("INSERT INTO notification_endpoints (endpoint_id, url, event_types,"
                    " secret, merchant_id, description) VALUES (%s, %s, %s, %s, %s, %s)",
                    (endpoint_id, url, patterns, key, owner, _description(description)))
        answer = {**_found(cur, endpoint_id), "secret": encode_secret(key)}
        return endpoint_id, "create", {"url": url, "event_types": patterns}, answer

    return once(cur, actor, idempotency_key, request, work)


def get(cur: Cursor, endpoint_id: str) -> dict[str, Any]:
    return _found(cur, endpoint_id)


def page(cur: Cursor, after: str | None, limit: int) -> tuple[list[dict[str, Any]],
                                                                str | None]:
    """The caller's endpoints by id, `limit` after the cursor (an endpoint id)."""
    if after is not None:
        check_endpoint_id(after)
    cur.execute(f"SELECT {COLUMNS} FROM notification_endpoints WHERE deleted_at IS NULL"
                " AND (%(after)s::text IS NULL OR endpoint_id > %(after)s)"
                " ORDER BY endpoint_id LIMIT %(limit)s", {"after": after, "limit": limit + 1})
    rows = [_answer(row) for row in cur.fetchall()]
    more = len(rows) > limit
    return rows[:limit], rows[limit - 1]["endpoint_id"] if more else None


def update(cur: Cursor, actor: Actor, endpoint_id: str, changes: dict[str, Any],
           guard: AddressGuard) -> dict[str, Any]:
    """Change the url, event types, description, or enable / disable (PATCH: only what
    is given; the same PATCH again changes nothing more)."""
    before = _found(cur, endpoint_id, lock=True)
    if "url" in changes:
        _checked_url(changes["url"], guard)
    if "event_types" in changes:
        changes["event_types"] = _events(changes["event_types"])
    if "description" in changes:
        _description(changes["description"])
    enabled = changes.pop("enabled", None)
    cur.execute(
        "UPDATE notification_endpoints SET url = coalesce(%(url)s, url),"
        " event_types = coalesce(%(types)s, event_types),"
        " description = CASE WHEN %(set_description)s THEN %(description)s"
        "  ELSE description END,"
        " disabled_at = CASE WHEN %(enabled)s IS NULL THEN disabled_at"
        "  WHEN %(enabled)s THEN NULL ELSE coalesce(disabled_at, now()) END,"
        " disabled_reason = CASE WHEN %(enabled)s IS NULL THEN disabled_reason"
        "  WHEN %(enabled)s THEN NULL ELSE coalesce(disabled_reason, 'disabled by '"
        "  || %(actor)s) END,"
        " failing_since = CASE WHEN %(enabled)s THEN NULL ELSE failing_since END"
        " WHERE endpoint_id = %(id)s",
        {"url": changes.get("url"), "types": changes.get("event_types"),
         "set_description": "description" in changes,
         "description": changes.get("description"), "enabled": enabled,
         "actor": actor.name, "id": endpoint_id})
    after = _found(cur, endpoint_id)
    detail = {k: [before[k], after[k]] for k in ("url", "event_types", "description",
                                                  "enabled") if before[k] != after[k]}
    if detail:
        once(cur, actor, None, {}, lambda: (endpoint_id, "update", jsonable(detail), {}))
    return after


def delete(cur: Cursor, actor: Actor, endpoint_id: str) -> None:
    """Gone for its merchant: disabled and hidden; what was sent to it stays in the
    books. Deleting a deleted one is not found (the first DELETE answered already)."""
    _found(cur, endpoint_id, lock=True)
    cur.execute("UPDATE notification_endpoints SET deleted_at = now(),"
                " disabled_at = coalesce(disabled_at, now()),"
                " disabled_reason = coalesce(disabled_reason, 'deleted')"
                " WHERE endpoint_id = %s", (endpoint_id,))
    once(cur, actor, None, {}, lambda: (endpoint_id, "delete", {}, {}))


def secret(cur: Cursor, endpoint_id: str) -> dict[str, Any]:
    """The endpoint's signing secret, and the previous one's end while both sign."""
    _found(cur, endpoint_id)
    cur.execute("SELECT secret, previous_secret_until FROM notification_endpoints"
                " WHERE endpoint_id = %s", (endpoint_id,))
    key, until = cur.fetchone() or (None, None)
    return {"endpoint_id": endpoint_id, "secret": encode_secret(bytes(key)),
            "previous_secret_until": until}


def rotate(cur: Cursor, actor: Actor, endpoint_id: str, overlap_s: float,
           idempotency_key: str | None) -> tuple[dict[str, Any], bool]:
    """A new secret; the old one still signs for `overlap_s`."""
    _found(cur, endpoint_id, lock=True)

    def work() -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        new = endpoints.rotate_secret(cur, endpoint_id, overlap_s)
        answer = {**secret(cur, endpoint_id), "secret": new}
        return endpoint_id, "rotate_secret", {"overlap_s": overlap_s}, answer

    return once(cur, actor, idempotency_key, {"endpoint_id": endpoint_id,
                                              "overlap_s": overlap_s}, work)


def attempts(cur: Cursor, endpoint_id: str, before: int | None, limit: int
             ) -> tuple[list[dict[str, Any]], str | None]:
    """The endpoint's delivery log, newest first: each attempt's time, status code,
    latency and the first bytes of the answer; the cursor of the next page."""
    _found(cur, endpoint_id)
    cur.execute("SELECT a.id, a.intent_id, i.type, a.attempt, a.started_at, a.latency_s,"
                " a.status_code, a.error, a.response_head, d.state"
                " FROM notification_attempts a"
                " JOIN notification_intents i ON i.intent_id = a.intent_id"
                " JOIN notification_deliveries d ON (d.intent_id, d.endpoint_id)"
                "  = (a.intent_id, a.endpoint_id)"
                " WHERE a.endpoint_id = %(endpoint)s"
                " AND (%(before)s::bigint IS NULL OR a.id < %(before)s)"
                " ORDER BY a.id DESC LIMIT %(limit)s",
                {"endpoint": endpoint_id, "before": before, "limit": limit + 1})
    rows = cur.fetchall()
    items = [{"attempt_id": a_id, "delivery_id": f"{intent}.{endpoint_id}",
              "event_type": kind, "attempt": n, "at": at,
              "latency_ms": round(latency * 1000, 1), "status_code": status,
              "error": error, "response_head": head, "delivery_state": state}
             for a_id, intent, kind, n, at, latency, status, error, head, state
             in rows[:limit]]
    return items, str(items[-1]["attempt_id"]) if len(rows) > limit else None


def redeliver(cur: Cursor, actor: Actor, delivery_id: str) -> dict[str, Any]:
    """One delivery due again now (pending, its attempts counted from zero); a pending
    one is left as it is."""
    match = DELIVERY_ID_PATTERN.fullmatch(delivery_id)
    if match is None:
        raise NotFound(f"no delivery {delivery_id[:120]!r}", code="unknown_delivery")
    intent, endpoint_id = match.groups()
    cur.execute("SELECT state FROM notification_deliveries d JOIN notification_endpoints e"
                " USING (endpoint_id) WHERE d.intent_id = %s AND d.endpoint_id = %s"
                " AND e.deleted_at IS NULL FOR UPDATE OF d", (intent, endpoint_id))
    row = cur.fetchone()
    if row is None:
        raise NotFound(f"no delivery {delivery_id!r}", code="unknown_delivery")
    if row[0] != "pending":
        cur.execute("UPDATE notification_deliveries SET state = 'pending', attempts = 0,"
                    " next_attempt_at = now() WHERE intent_id = %s AND endpoint_id = %s",
                    (intent, endpoint_id))
        once(cur, actor, None, {}, lambda: (endpoint_id, "redeliver",
                                            {"delivery_id": delivery_id}, {}))
    return {"delivery_id": delivery_id, "state": "pending", "was": row[0]}


def recover(cur: Cursor, actor: Actor, endpoint_id: str, since: datetime,
            idempotency_key: str | None) -> tuple[dict[str, Any], bool]:
    """Every failed delivery to the endpoint made since `since`, due again now."""
    _found(cur, endpoint_id, lock=True)

    def work() -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        cur.execute("UPDATE notification_deliveries SET state = 'pending', attempts = 0,"
                    " next_attempt_at = now() WHERE endpoint_id = %s AND state = 'failed'"
                    " AND created_at >= %s", (endpoint_id, since))
        answer = {"endpoint_id": endpoint_id, "since": since.isoformat(),
                  "redelivering": cur.rowcount}
        return endpoint_id, "recover", answer, answer

    return once(cur, actor, idempotency_key, {"endpoint_id": endpoint_id,
                                              "since": since.isoformat()}, work)


def test(cur: Cursor, actor: Actor, endpoint_id: str, idempotency_key: str | None
         ) -> tuple[dict[str, Any], bool]:
    """A signed `endpoint.test` intent to this endpoint alone, sent as every other."""
    _found(cur, endpoint_id)

    def work() -> tuple[str, str, dict[str, Any], dict[str, Any]]:
        source = f"test:{endpoint_id}:{secrets.token_hex(8)}"
        made = intent_id(source, IntentType.ENDPOINT_TEST)
        cur.execute("INSERT INTO notification_intents (intent_id, type, user_id, created_at,"
                    " data) VALUES (%s, %s, '', %s, %s)",
                    (made, IntentType.ENDPOINT_TEST.value, now_text(),
                     json.dumps({"endpoint_id": endpoint_id, "message": "a test from"
                                 " paystream: your endpoint receives and verifies"})))
        cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id)"
                    " VALUES (%s, %s)", (made, endpoint_id))
        answer = {"endpoint_id": endpoint_id, "delivery_id": f"{made}.{endpoint_id}",
                  "intent_id": made}
        return endpoint_id, "test", answer, answer

    return once(cur, actor, idempotency_key, {"endpoint_id": endpoint_id}, work)
