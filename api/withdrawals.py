"""POST /v1/withdrawals: a withdrawal_requested event written through the outbox, once
per Idempotency-Key.

The steps, in one READ COMMITTED transaction (api/database.py `write`):
  1. Validate the body (nothing is stored for a refused one: a retry after fixing it
     starts afresh).
  2. Look the (API key, Idempotency-Key) pair up: found with the same request hash, the
     stored answer is returned; with another hash, 409. Nothing is written.
  3. Claim the pair: INSERT ... ON CONFLICT DO NOTHING. A concurrent request with the
     same pair waits on the primary key until this one commits, then finds nothing to
     insert and goes back to step 2 (which now sees the committed row).
  4. Write the event as the ingest and the operator commands do (schema.outbox
     .write_events: payment_events + an outbox row), and the request's destination
     (api_withdrawals). COMMIT: claim, event and answer land together or not at all.

The event id is `api:withdrawal:<uuid4 hex>`: the `api:` prefix is refused from a
gateway (ingest/payments.py RESERVED_PREFIXES), so no provider can take an id the API
would write, and a random id never meets a provider's. It is also the hold's id, which
the gateway names (`hold_id`) when it settles or fails the withdrawal.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from paystream.edge.errors import ConflictError, InvalidRequestError, NotFoundError
from paystream.schema import users
from paystream.schema.amounts import AmountError, format_amount, parse_amount
from paystream.schema.db import Cursor
from paystream.schema.events import (
    ASSET_PATTERN,
    USER_ID_PATTERN,
    EventType,
    PaymentEvent,
    canonical_json,
)
from paystream.schema.outbox import WriteOutcome, write_events

ID_PREFIX = "api:withdrawal:"
IDEMPOTENCY_KEY_PATTERN = re.compile(r"[\x21-\x7e]{1,200}")  # printable ASCII, no spaces
DESTINATION_PATTERN = re.compile(r"[\x21-\x7e]{1,200}")
ACCEPTED = 202  # requested: the ledger holds the money when it applies the event


@dataclass(frozen=True)
class WithdrawalRequest:
    user_id: str
    asset: str
    amount: Decimal
    destination: str

    def request_hash(self) -> str:
        """What "the same body" means: the validated request, amounts canonical (so
        "10.0" and "10" are one request)."""
        return hashlib.sha256(canonical_json({
            "user_id": self.user_id, "asset": self.asset,
            "amount": format_amount(self.amount), "destination": self.destination,
        })).hexdigest()


def parse_request(user_id: str, asset: str, amount: str, destination: str,
                  assets: Collection[str]) -> WithdrawalRequest:
    """Step 1; InvalidRequestError naming the first broken field."""
    if USER_ID_PATTERN.fullmatch(user_id) is None:
        raise InvalidRequestError(f"user_id must match {USER_ID_PATTERN.pattern}",
                                  code="invalid_user_id")
    if ASSET_PATTERN.fullmatch(asset) is None or asset not in assets:
        raise InvalidRequestError(f"asset must be one of {', '.join(sorted(assets))}",
                                  code="unsupported_asset")
    try:
        parsed = parse_amount(amount)
    except AmountError as exc:
        raise InvalidRequestError(str(exc), code="invalid_amount") from None
    if DESTINATION_PATTERN.fullmatch(destination) is None:
        raise InvalidRequestError("destination is 1 to 200 printable ASCII characters,"
                                  " no spaces", code="invalid_destination")
    return WithdrawalRequest(user_id, asset, parsed, destination)


def check_idempotency_key(value: str | None) -> str:
    if value is None:
        raise InvalidRequestError("the Idempotency-Key header is required",
                                  code="missing_idempotency_key")
    if IDEMPOTENCY_KEY_PATTERN.fullmatch(value) is None:
        raise InvalidRequestError("Idempotency-Key is 1 to 200 printable ASCII characters,"
                                  " no spaces", code="invalid_idempotency_key")
    return value


def request(cur: Cursor, *, key_id: str, idempotency_key: str, wanted: WithdrawalRequest,
            provider: str, trace_id: str) -> tuple[int, dict[str, Any], bool]:
    """Steps 2 to 4: (status code, body) of the answer, the first one for a repeat, and
    whether it was a repeat."""
    request_hash = wanted.request_hash()
    stored = _stored(cur, key_id, idempotency_key, request_hash)
    if stored is not None:
        return (*stored, True)
    if not users.exists(cur, wanted.user_id):
        raise NotFoundError(f"no user {wanted.user_id!r}", code="unknown_user")
    withdrawal_id = ID_PREFIX + uuid.uuid4().hex
    answer = {"withdrawal_id": withdrawal_id, "status": "requested",
              "user_id": wanted.user_id, "asset": wanted.asset,
              "amount": format_amount(wanted.amount), "destination": wanted.destination,
              "trace_id": trace_id}
    cur.execute("INSERT INTO api_idempotency (key_id, idempotency_key, request_hash,"
                " status_code, response, withdrawal_id) VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (key_id, idempotency_key) DO NOTHING RETURNING 1",
                (key_id, idempotency_key, request_hash, ACCEPTED,
                 json.dumps(answer, separators=(",", ":")), withdrawal_id))
    if cur.fetchone() is None:  # a concurrent request with the key committed first
        stored = _stored(cur, key_id, idempotency_key, request_hash)
        assert stored is not None, "the claim conflicted, so the row exists"
        return (*stored, True)
    event = PaymentEvent(withdrawal_id, EventType.WITHDRAWAL_REQUESTED, wanted.user_id,
                         wanted.asset, wanted.amount, provider)
    (outcome,) = write_events(cur, [(event, trace_id)])
    assert outcome is WriteOutcome.ACCEPTED, f"a fresh random event id was {outcome}"
    cur.execute("INSERT INTO api_withdrawals (withdrawal_id, key_id, user_id, asset, amount,"
                " destination) VALUES (%s, %s, %s, %s, %s, %s)",
                (withdrawal_id, key_id, wanted.user_id, wanted.asset,
                 format_amount(wanted.amount), wanted.destination))
    return ACCEPTED, answer, False


def _stored(cur: Cursor, key_id: str, idempotency_key: str, request_hash: str
            ) -> tuple[int, dict[str, Any]] | None:
    cur.execute("SELECT request_hash, status_code, response FROM api_idempotency"
                " WHERE key_id = %s AND idempotency_key = %s", (key_id, idempotency_key))
    row = cur.fetchone()
    if row is None:
        return None
    if row[0] != request_hash:
        raise ConflictError("this Idempotency-Key was used with another request body",
                            code="idempotency_key_reused")
    return int(row[1]), dict(row[2])
