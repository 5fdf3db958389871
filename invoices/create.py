"""An invoice's creation (once per Idempotency-Key) and its cancel: the merchant API's
door, in the caller's transaction (api/database.py `write`).

create, in one READ COMMITTED transaction:
  1. The request was validated (parse_request): nothing is stored for a refused one.
  2. One creator per (API key, Idempotency-Key) at a time: a transaction-scoped advisory
     lock on the pair, then the pair is looked up. Found with the same request hash: the
     invoice as it is now, 200, nothing written; with another hash: 409. The lock makes
     a racing request with the pair wait here until the first commits, so it never takes
     an address it would have to give back (a pool of one address serves 20 racers).
  3. A chain invoice gets its dedicated deposit address: one of the user's own on the
     network that no invoice ever used, else one taken from the operator's pool
     (deposit_address_pool, FOR UPDATE SKIP LOCKED: concurrent invoices take different
     ones) and made the user's deposit address for good. None: 409
     `no_address_available`, naming `paystream addresses add --pool`.
  4. The invoice row: INSERT ... ON CONFLICT DO NOTHING. The UNIQUE (api_key_id,
     idempotency_key) is the claim, the unique (network, address) the address's: a
     conflict on the address (another invoice of the user took the same spare address
     first; its insert waited for that one's commit) tries the next address.
  5. Its status history line (`created`) and the invoice.created intent through the
     outbox (notices.created). COMMIT: claim, address, row, history and intent land
     together or not at all.

cancel: an open invoice (new, processing) with nothing credited becomes invalid, with
its history line and invoice.invalid intent; otherwise 409 with the reason.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from paystream.invoices import model, notices, reads, rules
from paystream.invoices.model import Invoice
from paystream.notify.intents import Intent, outbox_batches
from paystream.notify.seal import Sealer
from paystream.refusals import Conflict, Invalid, NotFound
from paystream.schema import users
from paystream.schema.amounts import AmountError, format_amount, parse_amount
from paystream.schema.chain import ADDRESS_PATTERN, NETWORK_PATTERN
from paystream.schema.db import Cursor
from paystream.schema.events import (
    ASSET_PATTERN,
    NOTIFICATIONS_AGGREGATE,
    USER_ID_PATTERN,
    canonical_json,
)
from paystream.schema.outbox import publish

CREATED, REPLAYED = 201, 200
# The deadline: at least a minute (a shorter one expires before a payment can be seen),
# at most 90 days (the reminder chain and the address's dedication are about days).
MIN_EXPIRES_IN_S = 60
MAX_EXPIRES_IN_S = 90 * 24 * 3600
ORDER_ID_MAX = 200
METADATA_MAX_BYTES = 4096
# A chain asset as schema/chain.py deposit_asset writes it: `<NETWORK>:native` or
# `<NETWORK>:<token contract>`; anything else is a gateway asset.
CHAIN_ASSET_PATTERN = re.compile(r"(?P<network>[A-Za-z0-9_]{1,64}):(?P<token>[A-Za-z0-9]{6,130})")
NATIVE = "native"
# A share of the amount, as NUMERIC(5,2) holds it: 0 to 99.99, at most 2 decimals.
TOLERANCE_PATTERN = re.compile(r"[0-9]{1,2}(\.[0-9]{1,2})?")
# Another invoice of the same user may take the spare address picked first (step 4):
# every lost try means another invoice committed one, so each try is progress; the bound
# only keeps a pathological burst of one user's invoices from looping long.
ADDRESS_ATTEMPTS = 32


@dataclass(frozen=True)
class InvoiceRequest:
    """A validated creation request (parse_request); amounts exact, asset normalised."""

    user_id: str
    asset: str
    amount: Decimal
    expires_in_s: int
    order_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tolerance_pct: Decimal = Decimal(0)

    @property
    def network(self) -> str | None:
        """The chain network of a chain asset; None for a gateway asset."""
        found = chain_asset(self.asset)
        return found[0] if found is not None else None

    def request_hash(self) -> str:
        """What "the same body" means: the validated request, amounts canonical (so
        "10.0" and "10" are one request), the asset as stored."""
        return hashlib.sha256(canonical_json({
            "user_id": self.user_id, "asset": self.asset,
            "amount": format_amount(self.amount), "expires_in_s": self.expires_in_s,
            "order_id": self.order_id, "metadata": dict(self.metadata),
            "payment_tolerance_pct": format_amount(self.tolerance_pct),
        })).hexdigest()


def chain_asset(asset: str) -> tuple[str, str] | None:
    """(network, the asset as a chain deposit names it) of a chain asset, else None:
    the network upper-cased, the token contract lower-cased (schema/users.py stores
    addresses so, the chain's providers report them so)."""
    found = CHAIN_ASSET_PATTERN.fullmatch(asset)
    if found is None:
        return None
    network, token = found["network"].upper(), found["token"].lower()
    if NETWORK_PATTERN.fullmatch(network) is None:
        return None
    if token != NATIVE and ADDRESS_PATTERN.fullmatch(token.removeprefix("0x")) is None:
        return None
    return network, f"{network}:{token}"


def parse_request(user_id: str, asset: str, amount: object, expires_in_s: object, *,
                  order_id: str | None = None, metadata: object = None,
                  tolerance_pct: object = None,
                  gateway_assets: Collection[str] | None = None) -> InvoiceRequest:
    """Step 1; Invalid naming the first broken field. `gateway_assets`: the
    assets a gateway invoice may be in (None: any asset code)."""
    if not isinstance(user_id, str) or USER_ID_PATTERN.fullmatch(user_id) is None:
        raise Invalid(f"user_id must match {USER_ID_PATTERN.pattern}",
                                  code="invalid_user_id")
    return InvoiceRequest(
        user_id, _asset(asset, gateway_assets), _amount(amount), _expires_in(expires_in_s),
        check_order_id(order_id), _metadata(metadata), _tolerance(tolerance_pct))


def _asset(asset: object, gateway_assets: Collection[str] | None) -> str:
    if isinstance(asset, str):
        found = chain_asset(asset)
        if found is not None:
            return found[1]
        if ASSET_PATTERN.fullmatch(asset) is not None and (
                gateway_assets is None or asset in gateway_assets):
            return asset
    known = "" if gateway_assets is None else (
        " or one of the gateway's: " + ", ".join(sorted(gateway_assets)))
    raise Invalid("asset must be a chain asset (<NETWORK>:native or"
                              f" <NETWORK>:<token contract>){known}",
                              code="unsupported_asset")


def _amount(amount: object) -> Decimal:
    try:
        return parse_amount(amount)
    except AmountError as exc:
        raise Invalid(str(exc), code="invalid_amount") from None


def _expires_in(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (
            MIN_EXPIRES_IN_S <= value <= MAX_EXPIRES_IN_S):
        raise Invalid(
            f"expires_in_s must be an integer from {MIN_EXPIRES_IN_S} to {MAX_EXPIRES_IN_S}"
            " (90 days)", code="invalid_expires_in_s")
    return value


def check_order_id(value: object) -> str | None:
    """An order id as a merchant may give it (and search by); None stays None."""
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= ORDER_ID_MAX or not (
            value.isprintable()):
        raise Invalid(f"order_id is 1 to {ORDER_ID_MAX} printable characters",
                                  code="invalid_order_id")
    return value


def _metadata(value: object) -> dict[str, Any]:
    """A JSON object of at most METADATA_MAX_BYTES (compact UTF-8) that Postgres' jsonb
    takes: no NaN or infinity, no NUL, no lone surrogate."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Invalid("metadata must be a JSON object", code="invalid_metadata")
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, sort_keys=True,
                          separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except (ValueError, TypeError, RecursionError):
        raise Invalid("metadata must be plain JSON (no NaN, no infinity, no"
                                  " unpaired surrogate)", code="invalid_metadata") from None
    if "\\u0000" in text:
        raise Invalid("metadata may not contain a NUL character",
                                  code="invalid_metadata")
    if size > METADATA_MAX_BYTES:
        raise Invalid(f"metadata is {size} bytes as compact JSON; at most"
                                  f" {METADATA_MAX_BYTES}", code="invalid_metadata")
    return dict(value)


def _tolerance(value: object) -> Decimal:
    """A string like an amount's (a Decimal from a direct caller): NUMERIC(5,2)."""
    if value is None:
        return Decimal(0)
    if isinstance(value, str) and TOLERANCE_PATTERN.fullmatch(value) is not None:
        return Decimal(value)
    if (isinstance(value, Decimal) and value.is_finite() and 0 <= value < 100
            and value == value.quantize(Decimal("0.01"))):
        return value
    raise Invalid("payment_tolerance_pct is a string: a percentage from 0 to"
                              " 99.99 with at most 2 decimals (e.g. \"2.5\")",
                              code="invalid_tolerance")


def create(cur: Cursor, *, key_id: str | None, idempotency_key: str | None,
           wanted: InvoiceRequest, created_at_text: str, sealer: Sealer,
           trace_id: str | None = None) -> tuple[int, dict[str, Any], bool]:
    """Steps 2 to 5: (status code, the invoice as the API answers it, replayed). Without
    a key id and an Idempotency-Key (a test's or a tool's invoice) every call creates."""
    request_hash = wanted.request_hash()
    keyed = key_id is not None and idempotency_key is not None
    if keyed:
        # Step 2. hashtextextended: 64 bits of the pair; a collision only serialises two
        # unrelated creations a moment.
        cur.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                    (f"invoice:{key_id}:{idempotency_key}",))
        stored = _stored(cur, key_id, idempotency_key, request_hash)
        if stored is not None:
            return REPLAYED, reads.summary(stored), True
    if not users.exists(cur, wanted.user_id):
        raise NotFound(f"no user {wanted.user_id!r}", code="unknown_user")
    invoice_id = model.ID_PREFIX + uuid.uuid4().hex
    row = (invoice_id, wanted, key_id if keyed else None,
           idempotency_key if keyed else None, request_hash)
    network = wanted.network
    # Steps 3 and 4.
    invoice = (_insert(cur, *row, None, None) if network is None
               else _insert_with_address(cur, *row, network))
    if invoice is None:
        # A gateway invoice's insert conflicts on nothing but the claim, which the lock
        # serialises; a fresh uuid4 never meets another's id.
        raise AssertionError("a gateway invoice's insert conflicted")
    # Step 5.
    model.record_history(cur, invoice, "created")
    _tell(cur, sealer, [notices.created(invoice, created_at_text)], trace_id or invoice_id,
          invoice.user_id)
    return CREATED, reads.summary(invoice), False


def _stored(cur: Cursor, key_id: str | None, idempotency_key: str | None,
            request_hash: str) -> Invoice | None:
    cur.execute("SELECT invoice_id, request_hash FROM invoices WHERE api_key_id = %s"
                " AND idempotency_key = %s", (key_id, idempotency_key))
    found = cur.fetchone()
    if found is None:
        return None
    if found[1] != request_hash:
        raise Conflict("this Idempotency-Key was used with another request body",
                            code="idempotency_key_reused")
    return model.fetch(cur, found[0])


def _insert(cur: Cursor, invoice_id: str, wanted: InvoiceRequest, key_id: str | None,
            idempotency_key: str | None, request_hash: str, network: str | None,
            address: str | None) -> Invoice | None:
    """The invoice row, or None if a unique index refused it (the address, step 4)."""
    cur.execute(
        "INSERT INTO invoices (invoice_id, user_id, asset, amount, tolerance_pct, order_id,"
        " metadata, network, address, expires_at, api_key_id, idempotency_key, request_hash)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s,"
        " now() + make_interval(secs => %s), %s, %s, %s)"
        f" ON CONFLICT DO NOTHING RETURNING {model.COLUMNS}",
        (invoice_id, wanted.user_id, wanted.asset, format_amount(wanted.amount),
         format_amount(wanted.tolerance_pct), wanted.order_id,
         json.dumps(dict(wanted.metadata), separators=(",", ":")), network, address,
         wanted.expires_in_s, key_id, idempotency_key, request_hash))
    found = cur.fetchone()
    return Invoice.from_row(found) if found is not None else None


def _insert_with_address(cur: Cursor, invoice_id: str, wanted: InvoiceRequest,
                         key_id: str | None, idempotency_key: str | None,
                         request_hash: str, network: str) -> Invoice:
    """Steps 3 and 4 of a chain invoice: the user's spare address, else the pool's."""
    row = (invoice_id, wanted, key_id, idempotency_key, request_hash, network)
    lost: list[str] = []
    for _ in range(ADDRESS_ATTEMPTS):
        own = _spare_address(cur, wanted.user_id, network, lost)
        if own is not None:
            invoice = _insert(cur, *row, own)
            if invoice is not None:
                return invoice
            lost.append(own)
            continue
        pooled = _pooled_address(cur, wanted.user_id, network, lost)
        if pooled is None:
            break
        invoice = _insert(cur, *row, pooled)
        if invoice is None:
            lost.append(pooled)
            continue
        cur.execute("UPDATE deposit_address_pool SET taken_by = %s, taken_at = now()"
                    " WHERE network = %s AND address = %s", (invoice_id, network, pooled))
        try:
            users.add_address(cur, network, pooled, wanted.user_id)
        except users.UserError as exc:
            # Assigned to another user since the pick (the API's own address route):
            # the transaction is given up; a retry picks another.
            raise Conflict(f"{exc}; retry", code="address_taken") from None
        return invoice
    raise Conflict(
        f"no deposit address on {network} for user {wanted.user_id}: each of theirs is"
        " an invoice's already and the pool has none free; load some with"
        f" `paystream addresses add --pool {network} ADDRESS...`",
        code="no_address_available")


def _spare_address(cur: Cursor, user_id: str, network: str, lost: list[str]) -> str | None:
    """One of the user's deposit addresses on `network` that no invoice ever used."""
    # OFFSET 0 keeps each NOT EXISTS a probe of (network, address) per candidate: pulled
    # up into an anti-join, the planner (on a young table's statistics) probed by network
    # alone and filtered, 12 ms for a user of 300 addresses against 0.6 ms.
    cur.execute("SELECT d.address FROM deposit_addresses d WHERE d.user_id = %s"
                " AND d.network = %s AND d.address <> ALL(%s::text[])"
                " AND NOT EXISTS (SELECT 1 FROM invoices i WHERE i.network = d.network"
                " AND i.address = d.address OFFSET 0)"
                " ORDER BY d.created_at, d.address LIMIT 1", (user_id, network, lost))
    found = cur.fetchone()
    return str(found[0]) if found is not None else None


def _pooled_address(cur: Cursor, user_id: str, network: str, lost: list[str]
                    ) -> str | None:
    """A free pool address on `network`, locked (skipping those another creation holds):
    oldest first, never one another user has as a deposit address or an invoice used
    (each a primary-key probe per candidate: OFFSET 0, as in _spare_address)."""
    cur.execute("SELECT p.address FROM deposit_address_pool p WHERE p.network = %s"
                " AND p.taken_by IS NULL AND p.address <> ALL(%s::text[])"
                " AND NOT EXISTS (SELECT 1 FROM deposit_addresses d WHERE"
                " d.network = p.network AND d.address = p.address AND d.user_id <> %s"
                " OFFSET 0)"
                " AND NOT EXISTS (SELECT 1 FROM invoices i WHERE i.network = p.network"
                " AND i.address = p.address OFFSET 0)"
                " ORDER BY p.added_at LIMIT 1 FOR UPDATE OF p SKIP LOCKED",
                (network, lost, user_id))
    found = cur.fetchone()
    return str(found[0]) if found is not None else None


def cancel(cur: Cursor, invoice_id: str, *, created_at_text: str, sealer: Sealer,
           trace_id: str | None = None, cause: str = "cancelled") -> Invoice:
    """Cancel an open invoice with nothing credited: invalid, its history line (`cause`)
    and its intents; the invoice after. NotFound, or Conflict with the reason
    (settled, expired, already invalid, or money credited)."""
    before = model.fetch(cur, invoice_id, lock=True)
    if before is None:
        raise NotFound(f"no invoice {invoice_id[:200]!r}", code="unknown_invoice")
    if not before.state.is_open:
        raise Conflict(f"invoice {invoice_id} is {before.state.value}: only an open"
                            " (new or processing) invoice can be cancelled",
                            code="invoice_not_open")
    if before.amount_paid > 0:
        raise Conflict(f"invoice {invoice_id} has {format_amount(before.amount_paid)}"
                            f" {before.asset} credited: a paid invoice cannot be cancelled",
                            code="invoice_paid")
    after_standing = rules.standing(before.amount, before.tolerance_pct, rules.Payments(),
                                    deadline_passed=False, cancelled=True)
    cur.execute(f"UPDATE invoices SET state = %s, additional_status = %s, updated_at = now()"
                f" WHERE invoice_id = %s RETURNING {model.COLUMNS}",
                (after_standing.state.value,
                 after_standing.additional.value if after_standing.additional else None,
                 invoice_id))
    found = cur.fetchone()
    assert found is not None, "the invoice is locked, so it is still there"
    after = Invoice.from_row(found)
    model.record_history(cur, after, cause)
    _tell(cur, sealer, notices.of_change(before, after, created_at_text),
          trace_id or invoice_id, after.user_id)
    return after


def _tell(cur: Cursor, sealer: Sealer, made: list[Intent], trace_id: str, user_id: str
          ) -> None:
    """The intents through the outbox, in the change's transaction (keyed by the user:
    their intents take one notification partition, in order)."""
    if made:
        publish(cur, NOTIFICATIONS_AGGREGATE,
                outbox_batches([(intent, trace_id) for intent in made], user_id, sealer))
