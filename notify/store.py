"""The sender's statements on the delivery slots: claim due slots with a lease, record
what the attempts answered. Each call is one transaction of its own, committed before
the caller goes on (a claim before any send, a record after the answers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from paystream.notify import intents
from paystream.notify.intents import Intent, IntentType, wants
from paystream.schema.db import Connection, Cursor

# Due slots of enabled endpoints, oldest first, at most `free` per endpoint (its
# capacity left in this process), locked SKIP LOCKED so concurrent senders share the
# work; the claim sets a lease and a claim id and counts the attempt; the same statement
# returns what the send needs (URL, keys, the intent's body).
_CLAIM = """
WITH busy AS (SELECT * FROM unnest(%(busy_ids)s::text[], %(busy_n)s::int[]) AS b(endpoint_id, n)),
picked AS (
    SELECT d.intent_id, d.endpoint_id, e.url, e.secret,
           CASE WHEN e.previous_secret_until > now() THEN e.previous_secret END AS previous
      FROM notification_endpoints e
      LEFT JOIN busy ON busy.endpoint_id = e.endpoint_id
     CROSS JOIN LATERAL (
        SELECT intent_id, endpoint_id FROM notification_deliveries d
         WHERE d.endpoint_id = e.endpoint_id AND d.state = 'pending'
           AND d.next_attempt_at <= now()
           AND (d.claimed_until IS NULL OR d.claimed_until < now())
         ORDER BY d.next_attempt_at
         LIMIT greatest(%(per_endpoint)s - coalesce(busy.n, 0), 0)
           FOR UPDATE SKIP LOCKED) d
     WHERE e.disabled_at IS NULL
     LIMIT %(limit)s)
UPDATE notification_deliveries s
   SET claimed_until = now() + make_interval(secs => %(lease_s)s),
       claim_id = gen_random_uuid(), attempts = s.attempts + 1
  FROM picked JOIN notification_intents i ON i.intent_id = picked.intent_id
 WHERE s.intent_id = picked.intent_id AND s.endpoint_id = picked.endpoint_id
RETURNING s.intent_id, s.endpoint_id, s.attempts, s.claim_id::text, picked.url,
          picked.secret, picked.previous, i.type, i.created_at, i.data, i.trace_id
"""


@dataclass(frozen=True)
class Claim:
    intent_id: str
    endpoint_id: str
    attempt: int  # 1 for the first
    claim_id: str
    url: str
    secrets: tuple[bytes, ...]  # the endpoint's key, and the previous during a rotation
    body: bytes  # the intent's wire form, the same bytes on every attempt
    created_at: datetime
    trace_id: str | None


@dataclass(frozen=True)
class Answer:
    """How an attempt ended and what becomes of its slot."""

    claim: Claim
    started_at: datetime
    latency_s: float
    status_code: int | None
    error: str | None
    state: str  # pending (retry later), delivered, failed
    next_attempt_in_s: float | None  # when pending
    response_head: str | None = None  # the answer's first bytes (delivery.HEAD_BYTES)


def body_of(intent_id: str, intent_type: str, created_at: datetime, data: Any) -> bytes:
    """The webhook body (notify/intents.py's Intent.body), compact JSON (orjson:
    the sender builds one per attempt)."""
    stamp = created_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return orjson.dumps(Intent(intent_id, IntentType(intent_type), "", stamp, data).body())


def claim(conn: Connection, busy: Mapping[str, int], *, per_endpoint: int, limit: int,
          lease_s: float) -> list[Claim]:
    """Claim due slots (committed before returning): at most `per_endpoint` minus
    `busy[endpoint]` per endpoint, `limit` in all."""
    if limit <= 0:
        return []
    with conn, conn.cursor() as cur:
        cur.execute(_CLAIM, {"busy_ids": list(busy), "busy_n": list(busy.values()),
                             "per_endpoint": per_endpoint, "limit": limit,
                             "lease_s": lease_s})
        rows = cur.fetchall()
    claims = []
    for (intent_id, endpoint_id, attempt, claim_id, url, secret, previous, kind, created_at,
         data, trace_id) in rows:
        keys = (bytes(secret),) + ((bytes(previous),) if previous is not None else ())
        claims.append(Claim(intent_id, endpoint_id, attempt, claim_id, url, keys,
                            body_of(intent_id, kind, created_at, data), created_at,
                            trace_id))
    return claims


@dataclass(frozen=True)
class Recorded:
    lost: int  # answers whose slot another sender had claimed meanwhile
    disabled: list[tuple[str, str]]  # (endpoint id, url) disabled just now


def record(conn: Connection, answers: Sequence[Answer], *, disable_after_s: float
           ) -> Recorded:
    """Record the answers in one transaction: every attempt; each slot's new state, only
    while the claim is still ours; the endpoints' failing runs, and disable those failing
    for longer than `disable_after_s`."""
    if not answers:
        return Recorded(0, [])
    rows = [{"intent_id": a.claim.intent_id, "endpoint_id": a.claim.endpoint_id,
             "claim_id": a.claim.claim_id, "attempt": a.claim.attempt,
             "started_at": a.started_at.isoformat(), "latency_s": a.latency_s,
             "status_code": a.status_code, "error": a.error, "state": a.state,
             "next_in_s": a.next_attempt_in_s, "head": a.response_head} for a in answers]
    payload = orjson.dumps(rows).decode()
    ok = sorted({a.claim.endpoint_id for a in answers if a.state == "delivered"})
    failing = sorted({a.claim.endpoint_id for a in answers if a.status_code is None
                      or not 200 <= a.status_code < 300} - set(ok))
    with conn, conn.cursor() as cur:
        cur.execute(
            "INSERT INTO notification_attempts (intent_id, endpoint_id, attempt, started_at,"
            " latency_s, status_code, error, response_head) SELECT intent_id, endpoint_id,"
            " attempt, started_at, latency_s, status_code, error, head"
            " FROM jsonb_to_recordset(%s::jsonb) AS r(intent_id text, endpoint_id text,"
            " attempt int, started_at timestamptz, latency_s float8, status_code int,"
            " error text, head text)", (payload,))
        cur.execute(
            "UPDATE notification_deliveries s SET state = r.state,"
            " next_attempt_at = CASE WHEN r.state = 'pending'"
            "   THEN now() + make_interval(secs => r.next_in_s) ELSE s.next_attempt_at END,"
            " claimed_until = NULL, claim_id = NULL, last_status = r.status_code,"
            " last_error = r.error,"
            " delivered_at = CASE WHEN r.state = 'delivered' THEN now() END"
            " FROM jsonb_to_recordset(%s::jsonb) AS r(intent_id text, endpoint_id text,"
            " claim_id uuid, state text, status_code int, error text, next_in_s float8)"
            " WHERE s.intent_id = r.intent_id AND s.endpoint_id = r.endpoint_id"
            " AND s.claim_id = r.claim_id", (payload,))
        lost = len(rows) - cur.rowcount
        if ok:
            cur.execute("UPDATE notification_endpoints SET failing_since = NULL"
                        " WHERE endpoint_id = ANY(%s) AND failing_since IS NOT NULL", (ok,))
        disabled: list[tuple[str, str]] = []
        if failing:
            cur.execute("UPDATE notification_endpoints SET failing_since = now()"
                        " WHERE endpoint_id = ANY(%s) AND failing_since IS NULL", (failing,))
            cur.execute(
                "UPDATE notification_endpoints SET disabled_at = now(),"
                " disabled_reason = 'failing since ' || failing_since::text"
                " WHERE endpoint_id = ANY(%s) AND disabled_at IS NULL"
                " AND failing_since < now() - make_interval(secs => %s)"
                " RETURNING endpoint_id, url", (failing, disable_after_s))
            disabled = [(row[0], row[1]) for row in cur.fetchall()]
            for endpoint_id, _url in disabled:
                tell_disabled(cur, endpoint_id)
    return Recorded(lost, disabled)


def tell_disabled(cur: Cursor, endpoint_id: str) -> None:
    """An endpoint just disabled for failing: the action recorded, and an
    `endpoint.disabled` intent for its merchant's other enabled endpoints that want it
    (an operator's endpoint, without a merchant, tells no one)."""
    cur.execute("SELECT merchant_id, url, disabled_reason, disabled_at"
                " FROM notification_endpoints WHERE endpoint_id = %s", (endpoint_id,))
    merchant_id, url, reason, disabled_at = cur.fetchone() or (None, None, None, None)
    cur.execute("INSERT INTO endpoint_actions (endpoint_id, merchant_id, actor, action,"
                " detail) VALUES (%s, %s, 'notifier', 'disabled', %s)",
                (endpoint_id, merchant_id, orjson.dumps({"reason": reason}).decode()))
    if merchant_id is None:
        return
    cur.execute("SELECT endpoint_id, event_types FROM notification_endpoints"
                " WHERE merchant_id = %s AND disabled_at IS NULL AND endpoint_id <> %s",
                (merchant_id, endpoint_id))
    told = [other for other, patterns in cur.fetchall()
            if wants(patterns, IntentType.ENDPOINT_DISABLED.value)]
    if not told:
        return
    made = intents.intent_id(f"disabled:{endpoint_id}:{disabled_at.isoformat()}",
                     IntentType.ENDPOINT_DISABLED)
    cur.execute("INSERT INTO notification_intents (intent_id, type, user_id, created_at,"
                " data) VALUES (%s, %s, '', now(), %s) ON CONFLICT DO NOTHING",
                (made, IntentType.ENDPOINT_DISABLED.value, orjson.dumps({
                    "endpoint_id": endpoint_id, "url": url, "reason": reason,
                    "disabled_at": disabled_at.isoformat()}).decode()))
    cur.execute("INSERT INTO notification_deliveries (intent_id, endpoint_id)"
                " SELECT %s, unnest(%s::text[]) ON CONFLICT DO NOTHING", (made, told))
