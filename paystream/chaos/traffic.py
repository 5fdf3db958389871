"""The webhooks the chaos run sends: a deterministic mix, by seed, of the request classes
a real gateway produces (and a few it should not)."""

from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

ASSETS = ("USD", "EUR", "BTC")


class Kind(StrEnum):
    DEPOSIT = "deposit"              # a new credit
    WITHDRAWAL = "withdrawal"        # a new debit (may be rejected: insufficient funds)
    REDELIVERY = "redelivery"        # an identical retry of an accepted request
    CONFLICT = "conflict"            # an accepted event id with other content: 409
    INVALID = "invalid"              # bad signature or body: 4xx, nothing written
    POISON = "poison"                # accepted, but for an unknown user: dead-lettered


# Shares of the mix; redeliveries ~10% as the issue asks.
MIX = ((Kind.DEPOSIT, 0.52), (Kind.WITHDRAWAL, 0.27), (Kind.REDELIVERY, 0.10),
       (Kind.CONFLICT, 0.03), (Kind.INVALID, 0.05), (Kind.POISON, 0.03))


@dataclass
class Request:
    """One webhook (first attempt and its retries share `webhook_id` and `body`)."""
    kind: Kind
    event_id: str
    event_type: str
    user_id: str
    asset: str
    amount: str
    body: bytes
    webhook_id: str
    bad_signature: bool = False
    original: Request | None = None  # what a redelivery or conflict repeats
    # Filled in by the sender:
    status: int | None = None
    answer: str | None = None  # the body's "status" (accepted / duplicate) or error
    attempts: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class TrafficPlan:
    def __init__(self, run_id: str, users: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.run_id = run_id
        self.users = [f"chaos-{run_id}-u{i}" for i in range(users)]
        self.seq = 0
        self.answered_ok: list[Request] = []  # accepted originals, for redeliveries

    def _event_id(self) -> str:
        self.seq += 1
        return f"chaos-{self.run_id}-e{self.seq}"

    def _amount(self, low: int, high: int) -> str:
        cents = self.rng.randint(low * 100, high * 100)
        return str(Decimal(cents).scaleb(-2))

    def next(self) -> Request:
        kind = self.rng.choices([k for k, _ in MIX], [w for _, w in MIX])[0]
        if kind in (Kind.REDELIVERY, Kind.CONFLICT) and not self.answered_ok:
            kind = Kind.DEPOSIT
        if kind is Kind.REDELIVERY:
            orig = self.rng.choice(self.answered_ok)
            return Request(kind, orig.event_id, orig.event_type, orig.user_id, orig.asset,
                           orig.amount, orig.body, orig.webhook_id, original=orig)
        if kind is Kind.CONFLICT:
            orig = self.rng.choice(self.answered_ok)
            amount = str(Decimal(orig.amount) + Decimal("0.01"))
            return self._build(kind, orig.event_type, orig.user_id, orig.asset, amount,
                               event_id=orig.event_id, original=orig)
        user = self.rng.choice(self.users)
        asset = self.rng.choice(ASSETS)
        if kind is Kind.WITHDRAWAL:
            event_type = self.rng.choice(("withdrawal", "withdrawal", "withdrawal_fee"))
            return self._build(kind, event_type, user, asset, self._amount(1, 400))
        if kind is Kind.POISON:
            return self._build(kind, "deposit", f"chaos-{self.run_id}-ghost{self.seq}", asset,
                               self._amount(1, 100))
        if kind is Kind.INVALID:
            flavour = self.rng.choice(("signature", "float", "type"))
            req = self._build(kind, "deposit", user, asset, self._amount(1, 100))
            if flavour == "signature":
                req.bad_signature = True
            else:
                body = json.loads(req.body)
                if flavour == "float":
                    body["amount"] = float(req.amount)
                else:
                    body["event_type"] = "refund"
                req.body = json.dumps(body).encode()
            req.extra["flavour"] = flavour
            return req
        return self._build(kind, "deposit", user, asset, self._amount(1, 500))

    def _build(self, kind: Kind, event_type: str, user: str, asset: str, amount: str, *,
               event_id: str | None = None, original: Request | None = None) -> Request:
        event_id = event_id or self._event_id()
        body = json.dumps({"event_id": event_id, "event_type": event_type, "user_id": user,
                           "amount": amount, "asset": asset}).encode()
        return Request(kind, event_id, event_type, user, asset, amount, body,
                       "msg_" + uuid.UUID(int=self.rng.getrandbits(128)).hex,
                       original=original)

    def note_answer(self, req: Request) -> None:
        if req.kind in (Kind.DEPOSIT, Kind.WITHDRAWAL) and req.status is not None \
                and 200 <= req.status < 300:
            self.answered_ok.append(req)
